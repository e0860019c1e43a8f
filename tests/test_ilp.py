"""The fleet ILP against brute-force enumeration, and its statuses."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from planner.ilp import Candidate, ServiceModel, SplitOption, _build, canonical_ties, solve_fleet
from planner.ilp_solver import lp_name


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
    assert len(sol.pools) == 1 and sol.pools[0].config == "a1"


def test_exact_ties_go_to_the_pool_that_carries_most_whatever_the_candidates():
    """2 x tp1 and 1 x tp2 on one GPU type tie on cost, GPUs, pools and split; the plan takes the
    one that carries more (then the first label), in whatever order and company the candidates come."""
    opts = [SplitOption("none", None, {"all": 14.4})]
    tp1 = Candidate("none", "all", "g tp1", "g", 1, 2.99, 9.536)
    tp2 = Candidate("none", "all", "g tp2", "g", 2, 5.98, 19.169)
    # another type, beaten on cost: 2 replicas at $3.10 (at $2.99 it would tie on every term, and a
    # tie across types is the solver's to break, canonical_ties)
    other = Candidate("none", "all", "h tp1", "h", 1, 3.10, 7.3)
    for cands in ([tp1, tp2], [tp2, tp1], [tp1, other, tp2], [other, tp2, tp1]):
        sol = solve_fleet(opts, cands)
        assert [(p.config, p.replicas, p.gpus) for p in sol.pools] == [("g tp2", 1, 2)]
        assert sol.cost_per_hour == pytest.approx(5.98)
    weaker = Candidate("none", "all", "g tp2", "g", 2, 5.98, 19.0)  # carries less than 2 x 9.536
    assert [(p.config, p.replicas) for p in solve_fleet(opts, [weaker, tp1]).pools] == [("g tp1", 2)]
    # At least 2 replicas each: 2 x tp2 costs more than 2 x tp1, so nothing ties and nothing moves.
    assert [(p.config, p.replicas) for p in solve_fleet(opts, [tp2, tp1], min_replicas=2).pools] == [("g tp1", 2)]


def test_exact_ties_keep_the_more_precise_weights_before_the_larger_capacity():
    """A tie is no reason to quantise: 2 x tp1 int4 carries more than 1 x tp2 bf16 at the same cost
    and GPUs, and the bf16 pool is kept; between bf16 weights the fp8 KV cache yields to bf16."""
    opts = [SplitOption("none", None, {"all": 14.4})]
    int4 = Candidate("none", "all", "g tp1 w:int4", "g", 1, 2.99, 9.9, (4.25, 16.0))
    bf16 = Candidate("none", "all", "g tp2 w:bf16", "g", 2, 5.98, 19.169, (16.0, 16.0))
    fp8_kv = Candidate("none", "all", "g tp2 w:bf16 kv:fp8", "g", 2, 5.98, 19.5, (16.0, 8.0))
    for cands in ([int4, bf16], [bf16, int4], [int4, fp8_kv, bf16]):
        assert [(p.config, p.replicas) for p in solve_fleet(opts, cands).pools] == [("g tp2 w:bf16", 1)]


def test_canonical_ties_leave_a_class_of_several_pools_and_other_gpu_types_alone():
    opts = [SplitOption("none", None, {"all": 14.4})]
    a = Candidate("none", "all", "a tp1", "a", 1, 2.0, 9.0)
    b = Candidate("none", "all", "b tp2", "b", 2, 4.0, 30.0)  # same cost and GPUs, another type
    sol = solve_fleet(opts, [a])
    assert canonical_ties(sol, [a, b], 1) is sol
    mixed = dataclasses.replace(sol, pools=(dataclasses.replace(sol.pools[0], replicas=1, gpus=1, cost_per_hour=2.0),
                                            dataclasses.replace(sol.pools[0], config="a tp1 bis", replicas=1, gpus=1,
                                                                cost_per_hour=2.0)))
    assert canonical_ties(mixed, [a, Candidate("none", "all", "a tp2", "a", 2, 4.0, 30.0)], 1) is mixed


FINANCE_LEVER_OPTIONS = [
    SplitOption('none', None, {'all': 485.8232}),
    SplitOption('4096', 4096, {'short': 460.50209481599995, 'long': 25.321105184}),
    SplitOption('8192', 8192, {'short': 481.271036616, 'long': 4.552163384}),
    SplitOption('16384', 16384, {'short': 485.395675584, 'long': 0.427524416}),
]
FINANCE_LEVER_CANDIDATES = [  # (option, class, config, $ per replica-hour, capacity req/s), as the planner asked
    ('16384', 'short', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:16384', 2.99, 24.731648468831064),
    ('none', 'all', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:32768', 2.99, 24.28261839180315),
    ('4096', 'long', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:32768', 2.99, 4.440411849695393),
    ('8192', 'long', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:32768', 2.99, 2.3537816573885877),
    ('16384', 'long', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:32768', 2.99, 1.0567199857280662),
    ('4096', 'short', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:4096', 2.99, 32.53890492440664),
    ('8192', 'short', 'h100-sxm tp1 w:fp8 kv:bf16 ctx:8192', 2.99, 26.61643702218796),
    ('16384', 'short', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:16384', 5.98, 41.50291644114309),
    ('none', 'all', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:32768', 5.98, 40.81363387129118),
    ('4096', 'long', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:32768', 5.98, 7.672654710166312),
    ('8192', 'long', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:32768', 5.98, 4.124893537672462),
    ('16384', 'long', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:32768', 5.98, 1.9405625878271637),
    ('4096', 'short', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:4096', 5.98, 52.97696000370372),
    ('8192', 'short', 'h100-sxm tp2 w:fp8 kv:bf16 ctx:8192', 5.98, 44.450306273074425),
    ('16384', 'short', 'h200 tp1 w:fp8 kv:bf16 ctx:16384', 6.35, 27.029860529673865),
    ('none', 'all', 'h200 tp1 w:fp8 kv:bf16 ctx:32768', 6.35, 26.558864551773706),
    ('4096', 'long', 'h200 tp1 w:fp8 kv:bf16 ctx:32768', 6.35, 4.792790778173518),
    ('8192', 'long', 'h200 tp1 w:fp8 kv:bf16 ctx:32768', 6.35, 2.4083381060106754),
    ('4096', 'short', 'h200 tp1 w:fp8 kv:bf16 ctx:4096', 6.35, 35.37174958909871),
    ('8192', 'short', 'h200 tp1 w:fp8 kv:bf16 ctx:8192', 6.35, 28.95679556523851),
    ('16384', 'short', 'h200 tp2 w:fp8 kv:bf16 ctx:16384', 12.7, 47.050660702005366),
    ('none', 'all', 'h200 tp2 w:fp8 kv:bf16 ctx:32768', 12.7, 46.166485791540346),
    ('4096', 'long', 'h200 tp2 w:fp8 kv:bf16 ctx:32768', 12.7, 8.501366917662294),
    ('8192', 'long', 'h200 tp2 w:fp8 kv:bf16 ctx:32768', 12.7, 4.411955402404875),
    ('16384', 'long', 'h200 tp2 w:fp8 kv:bf16 ctx:32768', 12.7, 1.983911464258154),
    ('4096', 'short', 'h200 tp2 w:fp8 kv:bf16 ctx:4096', 12.7, 60.550042061468254),
    ('8192', 'short', 'h200 tp2 w:fp8 kv:bf16 ctx:8192', 12.7, 50.669741036383854),
    ('16384', 'short', 'l40s tp1 w:fp8 kv:bf16 ctx:16384', 1.4, 4.6784655064069405),
    ('none', 'all', 'l40s tp1 w:fp8 kv:bf16 ctx:32768', 1.4, 4.522333521464161),
    ('4096', 'long', 'l40s tp1 w:fp8 kv:bf16 ctx:32768', 1.4, 0.7245004479982209),
    ('8192', 'long', 'l40s tp1 w:fp8 kv:bf16 ctx:32768', 1.4, 0.31050709463730586),
    ('4096', 'short', 'l40s tp1 w:fp8 kv:bf16 ctx:4096', 1.4, 6.460234339383256),
    ('8192', 'short', 'l40s tp1 w:fp8 kv:bf16 ctx:8192', 1.4, 5.1916168411842065),
]


def test_ties_are_exact_where_a_solver_start_broke_them():
    """finance_2027's "fp8 KV cache off" lever, as the planner asked it: no split (21 replicas of
    one config) and a split at 8,192 (19 + 2) cost the same on the same 21 GPUs, and the split's
    second pool loses the tie. HiGHS started from the split (a MIP start on the tie-break solve)
    returned the split as optimal; both backends must return the single pool."""
    cands = [Candidate(o, k, label, label.split()[0], int(label.split()[1][2:]), price, cap)
             for o, k, label, price, cap in FINANCE_LEVER_CANDIDATES]
    one_pool = next(c for c in cands if c.option == "none" and c.config.startswith("h100-sxm tp1 "))
    replicas = math.ceil(FINANCE_LEVER_OPTIONS[0].class_rates_rps["all"] / one_pool.capacity_rps)
    for backend in ("highs", "cbc"):
        sol = solve_fleet(FINANCE_LEVER_OPTIONS, cands, backend=backend)
        assert (sol.option, sol.gpus, [p.replicas for p in sol.pools]) == ("none", replicas, [replicas])
        assert sol.cost_per_hour == pytest.approx(replicas * one_pool.cost_per_replica_hour)


class _Picks:
    """A stand-in for the tie-break's solver: it "solves" to the plan it is given, proven optimal."""

    name = "picks"

    def __init__(self, plan: dict[str, float], proven: bool = True):
        self.plan, self.proven = plan, proven

    def actualSolve(self, prob):
        from planner.pulp_import import pulp

        prob.assignVarsVals(self.plan)
        # A solve its time limit stopped with a plan in hand: status Optimal, solution only feasible
        prob.assignStatus(pulp.LpStatusOptimal, pulp.LpSolutionOptimal if self.proven else pulp.LpSolutionIntegerFeasible)
        return prob.status


@pytest.mark.parametrize("other_better", [False, True])
@pytest.mark.parametrize("keep_twin", [False, True])
def test_the_cost_optimum_stands_where_the_tie_break_only_finds_its_twin(keep_twin, other_better):
    """With keep_twin, break_ties keeps the first solve's plan where it ties with the second solve's on
    `ties` (the second's pick among full ties is arbitrary, and a fleet's sweeps already started from
    the first), and takes the second's where that is better on `ties`; without, the second's."""
    from planner.ilp_solver import break_ties, solver_for
    from planner.pulp_import import pulp

    prob = pulp.LpProblem("twins", pulp.LpMinimize)
    x = {name: prob.add_variable(name, cat="Binary") for name in ("a", "b")}
    cost = x["a"] + x["b"]
    prob += cost
    prob += cost >= 1, "cover"
    prob.solve(solver_for("highs", 10))
    first = max(x, key=lambda name: x[name].value())
    other = "b" if first == "a" else "a"
    ties = (2 if other_better else 1) * x[first] + x[other]
    break_ties(prob, cost, ties, _Picks({first: 0.0, other: 1.0}), keep_twin=keep_twin)
    kept = max(x, key=lambda name: x[name].value())
    assert kept == (first if keep_twin and not other_better else other)


def test_a_first_plan_its_time_limit_stopped_gives_way_to_a_cheaper_one_even_as_a_twin():
    """A first solve stopped by its time limit on a dearer plan (only feasible): the tie-break solve,
    bound by that plan's cost, finds a cheaper one equal on `ties`, which stands with keep_twin too
    (the first is no optimum to keep)."""
    from planner.ilp_solver import break_ties
    from planner.pulp_import import pulp

    prob = pulp.LpProblem("stopped", pulp.LpMinimize)
    a, b = prob.add_variable("a", cat="Binary"), prob.add_variable("b", cat="Binary")
    cost = 2 * a + b
    prob += cost
    prob += a + b >= 1, "cover"
    prob.solve(_Picks({"a": 1.0, "b": 0.0}, proven=False))
    break_ties(prob, cost, a + b, _Picks({"a": 0.0, "b": 1.0}), keep_twin=True)
    assert (a.value(), b.value(), pulp.value(cost)) == (0.0, 1.0, 1.0)


@pytest.mark.parametrize("backend", ["highs", "cbc"])
@pytest.mark.parametrize("seed", range(6))
def test_a_tie_break_decided_on_the_cost_optimum_equals_a_fresh_solve(seed, backend):
    """tie_break given as a test of the cost optimum (the lazy search's last round) answers as a
    second solve with tie_break=True (or False) would, on the model already solved."""
    options, cands, _ = random_instance(seed)
    seen = []

    def wanted(joint):
        seen.append(joint)
        return seed % 2 == 0

    asked = solve_fleet(options, cands, backend=backend, tie_break=wanted, keep_lp=True)
    fresh = solve_fleet(options, cands, backend=backend, tie_break=seed % 2 == 0, keep_lp=True)
    if not fresh.pools:
        assert (asked.status, asked.pools, seen) == (fresh.status, (), [])
        return
    assert len(seen) == 1 and seen[0].cost_per_hour == pytest.approx(fresh.cost_per_hour, abs=1e-6)
    key = ("status", "option", "threshold", "pools", "cost_per_hour", "gpus", "lp_text", "on_demand_gpus")
    assert [getattr(asked, k) for k in key] == [getattr(fresh, k) for k in key]


@pytest.mark.parametrize("backend", ["highs", "cbc"])
@pytest.mark.parametrize("seed", range(30))
def test_the_cheapest_candidates_alone_give_the_whole_models_plan(seed, backend, monkeypatch):
    """Where only the split ties the classes together, the model solved keeps each class's cheapest
    candidates (ilp.cheapest_of_class); with caps that never bind it keeps them all. Both give a plan
    of the same option, cost, GPUs, and cost and GPUs per class, ties broken alike (the instances tie
    often: GPU types share prices, tp 2 costs twice tp 1), at every rate scale and with a minimum per
    pool. The cut is made where nothing else binds, the LP text (--write-lp) keeps every candidate,
    and keeping the text changes no plan. (Between pools of two GPU types at one price, GPUs and
    replicas, the solver's pick follows its search path in either model: canonical_ties settles ties
    on one GPU type only, since elsewhere a cap may tell the types apart.)"""
    import planner.ilp as ilp

    options, cands, gpus = random_instance(seed)
    scale = 1.0 + seed % 3
    options = [dataclasses.replace(o, class_rates_rps={k: r * scale for k, r in o.class_rates_rps.items()})
               for o in options]
    cuts = []
    cheapest_of_class = ilp.cheapest_of_class
    monkeypatch.setattr(ilp, "cheapest_of_class", lambda *a: cuts.append(1) or cheapest_of_class(*a))
    never_binding = dict.fromkeys(gpus, 10 ** 6)
    for least in (1, 2):
        cuts.clear()
        whole = solve_fleet(options, cands, backend=backend, min_replicas=least, inventory=never_binding)
        assert not cuts  # a cap, even one that never binds, ties the classes together: no cut
        cheapest = solve_fleet(options, cands, backend=backend, min_replicas=least)
        assert cuts
        key = ("status", "option", "threshold", "cost_per_hour", "gpus")
        assert [getattr(cheapest, k) for k in key] == [getattr(whole, k) for k in key]
        per_class = [sorted((p.traffic_class, p.cost_per_hour, p.gpus, p.replicas) for p in sol.pools)
                     for sol in (cheapest, whole)]
        assert per_class[0] == per_class[1]
        kept = solve_fleet(options, cands, backend=backend, min_replicas=least, keep_lp=True)
        assert (kept.option, kept.pools) == (cheapest.option, cheapest.pools)
    servable = {o.key for o in options if all(any((c.option, c.traffic_class) == (o.key, k) for c in cands)
                                              for k in o.class_rates_rps)}
    assert all(lp_name("replicas", c.option, c.traffic_class, c.config) in kept.lp_text
               for c in cands if c.option in servable)
    _, parts, _ = _build([ServiceModel("", options, cands)], None, None, True, False, None, cheapest_only=True)
    rates = {(o.key, k): r for o in options for k, r in o.class_rates_rps.items()}
    kept = [parts[0].cands[i] for i in parts[0].keep]
    for (option, k), rate in rates.items():
        mine = [c for c in cands if (c.option, c.traffic_class) == (option, k)]
        costs = [c.cost_per_replica_hour * max(1, math.ceil(rate / c.capacity_rps - 1e-12)) for c in mine]
        assert sorted(c.config for c in kept if (c.option, c.traffic_class) == (option, k)) == sorted(
            c.config for c, cost in zip(mine, costs, strict=True) if cost <= min(costs) + 1e-6)
    assert len(kept) < len(cands)


def test_lp_names_every_constraint_family():
    options, cands, _ = random_instance(1)
    lp = solve_fleet(options, cands, keep_lp=True, inventory={"g0": 100}).lp_text
    for family in ("one_split", "cover_", "pool_exists_", "homogeneous_", "only_chosen_", "replicas_if_pool_",
                   "min_replicas_", "inventory_g0"):
        assert family in lp


def test_a_row_naming_a_variable_twice_is_refused_not_cut_to_its_last_coefficient():
    import pulp

    from planner.ilp import _affine

    prob = pulp.LpProblem("rows")
    x, y = prob.add_variable("x"), prob.add_variable("y")
    assert dict(_affine([(x, 1), (y, 2)])) == {x: 1, y: 2}
    # PuLP's own constructor keeps the last coefficient where the sum would be 3.
    assert dict(pulp.LpAffineExpression([(x, 1), (x, 2)])) == {x: 2}
    with pytest.raises(ValueError, match="names x more than once"):
        _affine([(x, 1), (y, 1), (x, 2)])


def test_inventory_infeasible_is_reported_as_a_status():
    opts = [SplitOption("none", None, {"all": 10.0})]
    cands = [Candidate("none", "all", "c", "h", 1, 3.0, 1.0)]
    sol = solve_fleet(opts, cands, inventory={"h": 5})
    assert sol.status == "Infeasible"
    assert sol.pools == ()


def test_an_infeasible_status_after_the_whole_time_limit_is_no_proof():
    """CBC stopped by its time limit before finding a plan says "Integer infeasible" (PuLP: Infeasible, with
    no solution status of infeasibility); that is no answer (ilp_solver.solve_within). A proof of
    infeasibility (a solution status saying so, as CBC's "Infeasible" and HiGHS's carry) stands however
    long it took, and so does an integer infeasibility CBC proved within its limit."""
    import time

    from planner.ilp_solver import solve_within
    from planner.pulp_import import pulp

    class Says(pulp.LpSolver):
        def __init__(self, seconds, sol_status):
            super().__init__()
            self.seconds, self.sol = seconds, sol_status

        def actualSolve(self, lp):
            time.sleep(self.seconds)
            lp.assignStatus(pulp.LpStatusInfeasible, self.sol)
            return lp.status

    prob = pulp.LpProblem("p", pulp.LpMinimize)
    prob += prob.add_variable("x", lowBound=0, upBound=1)
    stopped = pulp.LpSolutionNoSolutionFound  # CBC's "Integer infeasible", as PuLP reads it
    assert solve_within(prob, Says(0.05, stopped), time_limit_s=0.01) == pulp.LpStatusNotSolved
    assert solve_within(prob, Says(0.0, stopped), time_limit_s=60.0) == pulp.LpStatusInfeasible
    assert solve_within(prob, Says(0.05, pulp.LpSolutionInfeasible), time_limit_s=0.01) == pulp.LpStatusInfeasible
    # a model CBC proves infeasible from its linear problem, with a limit shorter than the call itself takes
    # (a process started, files written and read), stays infeasible; HiGHS's proof too
    for backend in ("highs", "cbc"):
        assert solve_fleet([SplitOption("none", None, {"all": 10.0})], [Candidate("none", "all", "c", "h", 1, 3.0, 1.0)],
                           inventory={"h": 5}, backend=backend, time_limit_s=1e-4).status == "Infeasible"


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


@pytest.mark.parametrize("backend", ["highs", "cbc"])
def test_the_tie_solve_ends_at_the_same_terms_with_reduced_cost_fixing(backend, monkeypatch):
    """Fixing by reduced costs before the tie solve (here on every problem: its threshold lowered
    to 0) ends at a plan with the same cost, GPUs, pools and split as the tie solve without it:
    finance_2027's lever whose split loses the tie, and random instances with one or two replicas
    at least and inventory caps."""
    import planner.ilp_solver as ilp_solver

    finance = [Candidate(o, k, label, label.split()[0], int(label.split()[1][2:]), price, cap)
               for o, k, label, price, cap in FINANCE_LEVER_CANDIDATES]
    cases = [(FINANCE_LEVER_OPTIONS, finance, 1, None)]
    for seed in range(24):
        options, cands, gpus = random_instance(seed)
        cases.append((options, cands, 1 + seed % 2, {next(iter(gpus)): 6 + seed} if seed % 3 else None))
    for options, cands, min_replicas, inventory in cases:
        plans = []
        for threshold in (10**9, 0):
            monkeypatch.setattr(ilp_solver, "FIX_FROM_INTEGER_VARIABLES", threshold)
            sol = solve_fleet(options, cands, min_replicas=min_replicas, inventory=inventory, backend=backend)
            plans.append((sol.status, round(sol.cost_per_hour, 6), sol.gpus, len(sol.pools), sol.option))
        assert plans[1] == plans[0]
