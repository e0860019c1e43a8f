"""The fleet ILP against brute-force enumeration, and its statuses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.ilp import Candidate, SplitOption, solve_fleet


def random_instance(seed: int):
    rng = np.random.default_rng(seed)
    gpus = {f"g{i}": float(rng.choice([1.0, 2.49, 3.1, 4.75])) for i in range(int(rng.integers(2, 4)))}
    options = [SplitOption("none", None, {"all": float(rng.uniform(1, 40))})]
    for t in rng.choice([4096, 8192, 16384], size=int(rng.integers(1, 3)), replace=False):
        total = float(rng.uniform(1, 40))
        share = float(rng.uniform(0.01, 0.3))
        options.append(SplitOption(str(t), int(t), {"short": total * (1 - share), "long": total * share}))
    cands = []
    for o in options:
        for k in o.class_rates_rps:
            for g, price in gpus.items():
                for tp in (1, 2):
                    if rng.random() < 0.25:
                        continue  # some configs cannot serve some classes
                    cap = float(rng.uniform(0.2, 12)) * tp ** rng.uniform(0.6, 1.2)
                    cands.append(Candidate(o.key, k, f"{g}-tp{tp}", g, tp, price * tp, cap))
    return options, cands, gpus


def brute_force(options, cands, *, min_replicas=1, inventory=None):
    """Enumerate every option and one config per class (homogeneous pools), minimal replica counts."""
    best = math.inf
    for o in options:
        per_class = []
        for k, rate in o.class_rates_rps.items():
            mine = [c for c in cands if c.option == o.key and c.traffic_class == k]
            per_class.append([(c, max(min_replicas, math.ceil(rate / c.capacity_rps - 1e-12))) for c in mine])
        if any(not choices for choices in per_class):
            continue
        for combo in itertools.product(*per_class):
            if inventory:
                used: dict[str, int] = {}
                for c, n in combo:
                    used[c.gpu] = used.get(c.gpu, 0) + n * c.gpus_per_replica
                if any(used.get(g, 0) > cap for g, cap in inventory.items()):
                    continue
            best = min(best, sum(c.cost_per_replica_hour * n for c, n in combo))
    return best


@pytest.mark.parametrize("backend", ["highs", "cbc"])
@pytest.mark.parametrize("seed", range(25))
def test_ilp_optimum_equals_brute_force(seed, backend):
    options, cands, _ = random_instance(seed)
    expected = brute_force(options, cands)
    if not math.isfinite(expected):
        assert solve_fleet(options, cands, backend=backend).status == "Infeasible"
        return
    sol = solve_fleet(options, cands, backend=backend)
    assert sol.status == "Optimal"
    assert sol.cost_per_hour == pytest.approx(expected, abs=1e-6)
    # The plan covers every class of its option.
    option = next(o for o in options if o.key == sol.option)
    for k, rate in option.class_rates_rps.items():
        assert sum(p.replicas * p.capacity_rps for p in sol.pools if p.traffic_class == k) >= rate - 1e-9


@pytest.mark.parametrize("backend", ["highs", "cbc"])
@pytest.mark.parametrize("seed", range(8))
def test_ilp_with_min_replicas_and_inventory_equals_brute_force(seed, backend):
    options, cands, gpus = random_instance(100 + seed)
    inventory = {next(iter(gpus)): 6}
    expected = brute_force(options, cands, min_replicas=2, inventory=inventory)
    assert math.isfinite(expected)  # every seed here has a plan; the test above covers infeasible
    sol = solve_fleet(options, cands, min_replicas=2, inventory=inventory, backend=backend)
    assert sol.status == "Optimal"
    assert sol.cost_per_hour == pytest.approx(expected, abs=1e-6)
    assert all(p.replicas >= 2 for p in sol.pools)
    g = next(iter(inventory))
    assert sum(p.gpus for p in sol.pools if p.gpu == g) <= 6


def test_split_chosen_when_clearly_right_and_not_when_clearly_wrong():
    # Long requests are 5% but need 8 GPUs a replica at the full limit; short ones fit 1 GPU.
    right = [SplitOption("none", None, {"all": 20.0}), SplitOption("8192", 8192, {"short": 19.0, "long": 1.0})]
    cands = [
        Candidate("none", "all", "big", "h", 8, 8 * 3.0, 4.0),
        Candidate("8192", "short", "small", "h", 1, 3.0, 5.0),
        Candidate("8192", "long", "big", "h", 8, 8 * 3.0, 2.0),
    ]
    assert solve_fleet(right, cands).threshold == 8192
    # Splitting buys nothing when the short pool is no better per dollar and adds a pool.
    wrong_cands = [
        Candidate("none", "all", "one", "h", 1, 3.0, 5.0),
        Candidate("8192", "short", "one", "h", 1, 3.0, 5.0),
        Candidate("8192", "long", "one", "h", 1, 3.0, 4.0),
    ]
    assert solve_fleet(right, wrong_cands).threshold is None


def test_ties_prefer_fewer_gpus_then_fewer_pools():
    opts = [SplitOption("none", None, {"all": 8.0})]
    cands = [
        Candidate("none", "all", "two-small", "a", 1, 2.0, 4.0),  # 2 replicas x 1 GPU, $4
        Candidate("none", "all", "one-big", "b", 2, 4.0, 8.0),  # 1 replica x 2 GPUs, $4
    ]
    sol = solve_fleet(opts, cands)
    assert sol.cost_per_hour == pytest.approx(4.0)
    assert sol.gpus == 2
    same_gpus = [
        Candidate("none", "all", "a1", "a", 1, 2.0, 4.0),
        Candidate("none", "all", "a2", "a", 1, 2.0, 4.0),
    ]
    sol = solve_fleet(opts, same_gpus, homogeneous=False)
    # One pool of two replicas, not one replica of each; which of two identical configs is the
    # solver's (the planner drops the later label before it asks: undominated_candidates).
    assert [(p.replicas, p.config in {"a1", "a2"}) for p in sol.pools] == [(2, True)]


def test_lp_names_every_constraint_family():
    options, cands, _ = random_instance(1)
    lp = solve_fleet(options, cands, keep_lp=True, inventory={"g0": 100}).lp_text
    for family in ("one_split", "cover_", "pool_exists_", "homogeneous_", "only_chosen_", "replicas_if_pool_",
                   "min_replicas_", "inventory_g0"):
        assert family in lp


def test_inventory_infeasible_is_reported_as_a_status():
    opts = [SplitOption("none", None, {"all": 10.0})]
    cands = [Candidate("none", "all", "c", "h", 1, 3.0, 1.0)]
    sol = solve_fleet(opts, cands, inventory={"h": 5})
    assert sol.status == "Infeasible"
    assert sol.pools == ()


def test_exclusion_cuts_give_the_next_best_plan():
    opts = [SplitOption("none", None, {"all": 10.0})]
    cands = [
        Candidate("none", "all", "best", "a", 1, 1.0, 5.0),
        Candidate("none", "all", "second", "b", 1, 1.5, 5.0),
    ]
    first = solve_fleet(opts, cands)
    second = solve_fleet(opts, cands, forbid=[frozenset({("none", "all", "best")})])
    assert first.pools[0].config == "best"
    assert second.pools[0].config == "second"
    assert second.cost_per_hour > first.cost_per_hour


@pytest.mark.parametrize("seed", range(5))
def test_highs_and_cbc_find_the_same_optimum_and_tie_break(seed):
    options, cands, _ = random_instance(seed)
    cbc = solve_fleet(options, cands, backend="cbc")
    highs = solve_fleet(options, cands, backend="highs")
    assert highs.status == cbc.status
    if cbc.pools:
        assert highs.cost_per_hour == pytest.approx(cbc.cost_per_hour, abs=1e-6)
        # The tie-break decides GPUs, then pools, then the split: neither is left to the solver.
        assert (highs.gpus, len(highs.pools), highs.option) == (cbc.gpus, len(cbc.pools), cbc.option)


def _reserved_case():
    # 15 reserved GPUs of type "old" (capped at 16) and a cheaper-per-request type "new".
    opts = [SplitOption("none", None, {"all": 20.0})]
    cands = [
        Candidate("none", "all", "old", "old", 1, 3.0, 1.0),  # $3.00 per request/s
        Candidate("none", "all", "new", "new", 1, 2.0, 1.0),  # $2.00 per request/s
    ]
    return opts, cands, {"old": 16}, {"old": (15, 2.1)}


def test_reserved_gpus_keep_a_pool_of_their_own_beside_a_homogeneous_pool():
    opts, cands, inventory, reserved = _reserved_case()
    sol = solve_fleet(opts, cands, inventory=inventory, reserved=reserved)
    # Paid anyway, the 15 reserved GPUs serve 15 req/s; the other 5 run on the cheaper type.
    assert {p.config: p.replicas for p in sol.pools} == {"old": 15, "new": 5}
    assert sol.cost_per_hour == pytest.approx(15 * 2.1 + 5 * 2.0)
    # Strictly one config per pool: the cheaper type takes everything, the reserved GPUs idle.
    strict = solve_fleet(opts, cands, inventory=inventory, reserved=reserved, reserved_pools=False)
    assert {p.config: p.replicas for p in strict.pools} == {"new": 20}
    assert strict.cost_per_hour == pytest.approx(15 * 2.1 + 20 * 2.0)
    assert "homogeneous_none_all_old" in solve_fleet(opts, cands, reserved=reserved, keep_lp=True).lp_text


def test_use_reserved_runs_every_reserved_gpu_even_beyond_the_demand():
    opts = [SplitOption("none", None, {"all": 4.0})]
    cands = [Candidate("none", "all", "old", "old", 2, 6.0, 1.0), Candidate("none", "all", "new", "new", 1, 2.0, 1.0)]
    reserved = {"old": (15, 2.1)}
    sol = solve_fleet(opts, cands, reserved=reserved)
    assert sum(p.gpus for p in sol.pools if p.gpu == "old") == 8  # demand needs 4 replicas of 2 GPUs
    used = solve_fleet(opts, cands, reserved=reserved, use_reserved=True)
    # 15 GPUs in pairs: 8 replicas, 16 GPUs, one of them on demand at $3.00.
    assert {p.config: p.replicas for p in used.pools} == {"old": 8}
    assert used.cost_per_hour == pytest.approx(15 * 2.1 + 3.0)
    assert "use_reserved_old" in solve_fleet(opts, cands, reserved=reserved, use_reserved=True, keep_lp=True).lp_text
