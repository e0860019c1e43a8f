"""The shortcuts of capacity evaluation give the answers of evaluating everything, searched in full."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.capacity import BOUND_REL_TOL, ReplicaModel, replica_capacity
from planner.deployment import make_deployment
from planner.evaluator import Evaluator
from planner.histogram import Histogram
from planner.ilp import Candidate, solve_fleet, undominated_candidates
from planner.paged import token_profile
from planner.plan_objects import candidate_configs, traffic_classes
from planner.plan_search import undominated_evaluations
from planner.roots import grid_point_above, largest_holding, largest_on_grid
from planner.scenario import Scenario
from planner.targets import SLO


def mixed_traffic() -> Histogram:
    rng = np.random.default_rng(5)
    prompts = np.r_[rng.integers(200, 6000, 3000), rng.integers(20_000, 60_000, 60)]
    outputs = np.r_[rng.integers(20, 800, 3000), rng.integers(100, 600, 60)]
    return Histogram.from_arrays(prompts, outputs)


@pytest.mark.parametrize("sizing", ["percentile", "expected"])
def test_evaluate_all_keeps_exactly_the_candidates_of_a_full_search(catalog, sizing):
    """Variants proved below a sibling are never searched; the candidates the ILP sees are those
    of searching every (config, class) pair with replica_capacity itself."""
    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 65536,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"prompt_below": 8192, "ttft_s": 2.0, "tpot_ms": 50}, {"ttft_s": 20, "tpot_ms": 80}]},
        "sizing": {"mode": sizing}, "gpus": ["h100-sxm", "l40s", "a100-80gb"], "tp": [1, 2],
        "weight_dtypes": ["bf16", "fp8", "int4"], "kv_dtypes": ["bf16", "fp8"], "split_thresholds": [16384],
    })
    model = catalog.model("llama-3.1-8b")
    hist = mixed_traffic()
    classes = traffic_classes(scn, hist, 65536, 30.0)
    configs = candidate_configs(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)
    ev = Evaluator(scn, catalog, model)
    evals = ev.evaluate_all(classes, configs)
    dominated = [e for e in evals if e.dominated_by]
    assert dominated  # the shortcut is taken here
    full = []
    for e in evals:
        tc, cfg = e.traffic_class, e.config
        dep = ev.deployment(cfg, tc.max_model_len)
        cap = replica_capacity(dep, ev.profile(tc, dep), tc.slo, sizing=sizing, quantile=scn.sizing.quantile)
        full.append(cap.max_rps)
        if e.dominated_by:
            best = max(f.capacity.max_rps for f in evals if f.capacity is not None and f.traffic_class is tc
                       and f.config.gpu.id == cfg.gpu.id and f.config.tp == cfg.tp)
            assert cap.max_rps < best
        else:
            assert e.capacity.max_rps == cap.max_rps
    kept = {e.key: e.capacity_rps for e in undominated_evaluations(evals)}
    import dataclasses

    searched = [dataclasses.replace(e, capacity=dataclasses.replace(e.capacity or _any(evals), max_rps=rps),
                                    dominated_by="") for e, rps in zip(evals, full, strict=True)]
    assert kept == {e.key: e.capacity_rps for e in undominated_evaluations(searched)}


def _any(evals):
    return next(e.capacity for e in evals if e.capacity is not None)


@pytest.mark.parametrize("seed", range(30))
def test_a_guess_changes_the_search_not_the_bound(seed):
    """For a margin increasing in N, the latency bound found from any guess is the one found without."""
    rng = np.random.default_rng(seed)
    root, n_hi = float(np.exp(rng.uniform(-3, 8))), float(np.exp(rng.uniform(0, 9)))
    slope = float(rng.uniform(0.1, 5))
    calls = []

    def margin(n):
        calls.append(n)
        return slope * math.log(n / root) + (0.3 * math.log(n / root) ** 3 if seed % 2 else 0.0)

    plain = largest_on_grid(margin, n_hi, BOUND_REL_TOL)
    for guess in (root * 0.5, root * 0.999, root, root * 1.01, root * 7, n_hi * 0.9, 1e-6 * n_hi):
        assert largest_on_grid(margin, n_hi, BOUND_REL_TOL, guess=guess) == plain
    if root < n_hi and root > 1e-6 * n_hi:
        k = math.floor(math.log(root) / math.log1p(BOUND_REL_TOL))
        assert plain == pytest.approx(math.exp(k * math.log1p(BOUND_REL_TOL)), rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_a_bound_found_before_is_proved_with_two_points(seed):
    """A guess that is the bound itself (the grid point a search without a guess found: a sweep's
    step whose binding target did not move) is read as its own point and proved by the next, which is
    grid_point_above's float; a guess on the grid below the bound still finds it."""
    rng = np.random.default_rng(900 + seed)
    root, n_hi = float(np.exp(rng.uniform(-3, 6))), float(np.exp(rng.uniform(7, 9)))
    calls = []

    def margin(n):
        calls.append(n)
        return math.log(n / root)

    bound = largest_on_grid(margin, n_hi, BOUND_REL_TOL)
    calls.clear()
    assert largest_on_grid(margin, n_hi, BOUND_REL_TOL, guess=bound) == bound
    assert calls == [bound, grid_point_above(bound, BOUND_REL_TOL)]
    assert margin(calls[1]) > 0 >= margin(bound)
    below = math.exp((round(math.log(bound) / math.log1p(BOUND_REL_TOL)) - 37) * math.log1p(BOUND_REL_TOL))
    assert largest_on_grid(margin, n_hi, BOUND_REL_TOL, guess=below) == bound


def test_the_targets_missing_above_a_bound_are_read_at_a_point_the_search_built(catalog):
    """replica_capacity names the targets that miss just above its latency bound from the grid point
    its search saw miss, and builds no latency point of its own for it."""
    rng = np.random.default_rng(0)
    prof = token_profile(Histogram.from_arrays(rng.integers(50, 4000, 2000), rng.integers(10, 1000, 2000)))
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    for slo in (SLO.single(ttft_s=0.5), SLO.single(tpot_ms=30), SLO.single(ttft_s=0.8, tpot_ms=25)):
        rm = ReplicaModel(dep, prof, slo)
        searched = []

        def margin(n, *a, searched=searched, margin=rm.margin, **kw):
            searched.append(n)
            return margin(n, *a, **kw)

        rm.margin = margin
        cap = replica_capacity(dep, prof, slo, model=rm)
        assert cap.binding in ("ttft", "tpot")
        assert cap.bound_batch in searched and grid_point_above(cap.bound_batch, BOUND_REL_TOL) in searched
        assert set(rm._points) == set(searched)  # every latency point built, the search's own


@pytest.mark.parametrize("seed", range(20))
def test_a_margin_infinite_past_a_wall_still_gives_the_grid_crossing(seed):
    """Past the token-budget ceiling a mean latency never settles (margin inf). The search must still
    land on the crossing's grid point: interpolating towards an infinite end used to creep one grid
    point a step and stop 200 steps up, far below the crossing, where the target holds."""
    rng = np.random.default_rng(500 + seed)
    root = float(np.exp(rng.uniform(-2, 4)))
    wall, n_hi = root * float(rng.uniform(1.05, 50)), root * float(rng.uniform(60, 5000))

    def margin(n):
        return math.inf if n >= wall else math.log(n / root)

    log_r = math.log1p(BOUND_REL_TOL)
    expected = math.exp(math.floor(math.log(root) / log_r) * log_r)
    assert largest_on_grid(margin, n_hi, BOUND_REL_TOL) == pytest.approx(expected, rel=1e-12)
    for guess in (root * 0.3, root, wall * 1.5, n_hi * 0.9):
        assert largest_on_grid(margin, n_hi, BOUND_REL_TOL, guess=guess) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_largest_holding_is_the_brute_force_answer(seed):
    """The integer regula falsi (Anderson-Björck) ends on the last integer whose f holds, for steep,
    flat, cubic and walled increasing functions alike, trying only integers inside the bracket."""
    rng = np.random.default_rng(700 + seed)
    lo, hi = int(rng.integers(-5000, 0)), int(rng.integers(1, 5000))
    root = float(rng.uniform(lo, hi))
    kind = seed % 4
    wall = float(rng.uniform(root, hi + 1))

    def f(k):
        assert isinstance(k, int) and lo <= k <= hi
        if kind == 0:
            return (k - root) * 3.0
        if kind == 1:
            return (k - root) ** 3
        if kind == 2:  # nearly flat below the root, steep past it
            return 1e-6 * (k - root) if k <= root else 1e3 * (k - root)
        return math.inf if k >= wall else (k - root) / 1000.0

    if f(lo) > 0 or f(hi) <= 0:
        pytest.skip("no crossing inside the bracket for this draw")
    expected = max(k for k in range(lo, hi + 1) if f(k) <= 0)
    assert largest_holding(f, lo, hi, f(lo), f(hi)) == expected


@pytest.mark.parametrize("seed", range(20))
def test_dropping_dominated_candidates_keeps_the_optimum(seed):
    """Candidates beaten on the same GPU type (capacity, cost and GPUs per replica) never change
    the ILP's optimum, with or without inventory caps and reservations."""
    rng = np.random.default_rng(1000 + seed)
    from planner.ilp import SplitOption

    options = [SplitOption("none", None, {"all": float(rng.uniform(1, 30))})]
    cands = []
    for g, price in (("a", 1.0), ("b", 2.3)):
        for tp in (1, 2, 4):
            for v in range(2):
                cap = float(rng.uniform(0.5, 6)) * tp ** rng.uniform(0.5, 1.3)
                cands.append(Candidate("none", "all", f"{g}-tp{tp}-v{v}", g, tp, price * tp, cap))
    inventory = {"a": int(rng.integers(2, 12))} if seed % 2 else None
    reserved = {"b": (int(rng.integers(1, 6)), 1.5)} if seed % 3 == 0 else None
    full = solve_fleet(options, cands, inventory=inventory, reserved=reserved, min_replicas=1 + seed % 2)
    fewer = undominated_candidates(cands, free_types=frozenset({"a", "b"} - set(inventory or ()) - set(reserved or ())))
    assert len(fewer) < len(cands)
    pruned = solve_fleet(options, fewer, inventory=inventory, reserved=reserved, min_replicas=1 + seed % 2)
    assert pruned.status == full.status
    if full.pools:
        assert pruned.cost_per_hour == pytest.approx(full.cost_per_hour, abs=1e-9)
        assert pruned.gpus == full.gpus
        # The next-best distinct plans: the pools of the plans excluded keep whatever they beat,
        # and the rest is pruned as before; each next-best plan costs and counts what it did.
        free = frozenset({"a", "b"} - set(inventory or ()) - set(reserved or ()))
        forbid, last = [], full
        for _ in range(3):
            forbid.append(frozenset((last.option, p.traffic_class, p.config) for p in last.pools))
            kw = {"inventory": inventory, "reserved": reserved, "min_replicas": 1 + seed % 2, "forbid": tuple(forbid)}
            last = solve_fleet(options, cands, **kw)
            fewer = undominated_candidates(cands, free_types=free, protected=frozenset().union(*forbid))
            again = solve_fleet(options, fewer, **kw)
            assert again.status == last.status
            if not last.pools:
                break
            assert again.cost_per_hour == pytest.approx(last.cost_per_hour, abs=1e-9)
            assert (again.gpus, len(again.pools)) == (last.gpus, len(last.pools))


def test_plans_searched_lazily_cost_what_searching_everything_costs(catalog, monkeypatch):
    """The plan and every exploration (split options, next-best plans, sensitivity, levers, the TTFT
    sweep) solve with pairs not searched standing in by proven upper bounds: every outcome's cost,
    GPUs and fleet are those of searching every pair (among plans tied on cost and GPUs, the one
    ilp.canonical_ties names, whatever was searched). The JSON names the pairs left unsized."""
    import planner.plan_search as plan_search
    from planner.plan_json import plan_json
    from planner.plan_search import outcome_of
    from planner.planning import make_plan

    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 65536,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"prompt_below": 8192, "ttft_s": 2.0, "tpot_ms": 50}, {"ttft_s": 20, "tpot_ms": 80}]},
        "sizing": {"mode": "percentile"}, "gpus": ["h100-sxm", "l40s", "a100-80gb", "h200"], "tp": [1, 2],
        "weight_dtypes": ["bf16", "int4"], "kv_dtypes": ["bf16", "fp8"], "split_thresholds": [16384],
        "verify": False, "min_replicas_per_pool": 2,
    })
    model, hist = catalog.model("llama-3.1-8b"), mixed_traffic()

    bounded = []

    def outcomes(threshold):
        monkeypatch.setattr(plan_search, "LAZY_MIN_PAIRS", threshold)
        plan = make_plan(scn, catalog, model, hist, 30.0)
        bounded.append([c for c in plan_json(plan)["candidates"] if c["capacity_bound_rps"] is not None])
        rows = ([outcome_of("plan", plan.solution)] + plan.split_analysis + plan.alternatives + plan.sensitivity
                + plan.levers + [o for _, o in plan.ttft_sweep])
        return [(o.name, o.feasible, round(o.cost_per_hour, 9), o.gpus, o.summary) for o in rows]

    searched = []
    original = plan_search.Evaluator.evaluate

    def counting(self, cfg, tc):
        searched.append(1)
        return original(self, cfg, tc)

    monkeypatch.setattr(plan_search.Evaluator, "evaluate", counting)
    lazy = outcomes(0)
    lazy_searches = len(searched)
    searched.clear()
    assert lazy == outcomes(10**9)
    assert lazy_searches < len(searched)
    lazy_bounded, full_bounded = bounded
    assert lazy_bounded and not full_bounded
    assert all(c["capacity_rps"] is None and c["capacity_bound_rps"] > 0 for c in lazy_bounded)


def test_highs_prints_nothing(capfd):
    """HiGHS prints a banner when a process builds its first solver; `--json` output must stay clean."""
    pytest.importorskip("highspy")
    import subprocess
    import sys

    code = ("from planner.ilp import Candidate, SplitOption, solve_fleet\n"
            "s = solve_fleet([SplitOption('none', None, {'all': 3.0})], "
            "[Candidate('none', 'all', 'c', 'g', 1, 1.0, 1.0)], backend='highs')\n"
            "assert s.status == 'Optimal' and s.pools[0].replicas == 3\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == ""


def _certified_on_two_types() -> Scenario:
    """A scenario certified by short simulations, on an H100 and an L40S: its per-GPU plans replay both."""
    return Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 16384,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 60}]},
        "gpus": ["h100-sxm", "l40s"], "tp": [1], "weight_dtypes": ["bf16"], "kv_dtypes": ["fp8"],
        "verify": True, "simulation": {"requests": 1000, "band_requests": 1000},
    })


def test_replays_started_ahead_are_the_ones_certification_would_run(catalog, monkeypatch):
    """The per-GPU plans' replays started in threads before the levers (certification.replay_ahead)
    are the ones certification would run, each run once, and give the same per-GPU rows."""
    import planner.certification as certification
    import planner.exploration as exploration
    from planner.planning import make_plan

    replayed = []
    replay = certification._replay

    def recording(st, setting):
        replayed.append((setting.name, setting.config, setting.replicas, round(setting.rate_rps, 9)))
        return replay(st, setting)

    monkeypatch.setattr(certification, "_replay", recording)

    scn = _certified_on_two_types()
    model, hist = catalog.model("llama-3.1-8b"), mixed_traffic().select_total(at_most=16384)

    def per_gpu_rows():
        plan = make_plan(scn, catalog, model, hist, 4.0)
        return [(o.name, o.feasible, round(o.cost_per_hour, 9), o.gpus, o.summary, o.why_not) for o in plan.per_gpu]

    ahead = per_gpu_rows()
    replayed_ahead, replayed[:] = sorted(replayed), []
    monkeypatch.setattr(exploration, "replay_ahead", lambda parts: None)
    assert per_gpu_rows() == ahead
    assert sorted(replayed) == replayed_ahead and len(set(replayed_ahead)) == len(replayed_ahead)
    assert len(ahead) == 2 and any(feasible for _, feasible, *_ in ahead)


def test_a_certified_plans_explorations_are_priced_by_what_its_per_gpu_plans_measured(catalog, monkeypatch):
    """The per-GPU plans are certified before the other explorations are solved, so a capacity their
    replays measure prices every row after them. Solved before them, the shipped fleet's chat_8b alone
    ran 4 l40s at 5.8 requests/s each beside its certified l40s-only plan of 27 for 145 requests/s (under
    5.6 each). Here the per-GPU plans' certification is taken to measure every pair but the plan's own
    at half its model capacity: no row may then plan such a pair above that, and none may plan the
    plan's own configs below the rates they held at (the class's ratio, now a half, had priced them
    there: certification.hold_certified_rates)."""
    import planner.certification as certification
    import planner.exploration as exploration
    from planner.planning import make_plan

    halves, held = {}, {}
    hold = certification.hold_certified_rates

    def key(tc, cfg):
        return tc.option, tc.name, cfg.label(tc.max_model_len)

    def measured_then_held(st, evals, pools):
        held.update({key(pd.traffic_class, pd.config): pd.replay_rps for pd in pools})
        for e in st.evaluator.evaluate_all(st.classes, st.configs):
            k = key(e.traffic_class, e.config)
            if k not in held and e.capacity is not None and e.capacity.max_rps > 0:
                halves[k] = e.capacity.max_rps / 2
                st.evaluator.record_simulated(e, halves[k])
        hold(st, evals, pools)

    monkeypatch.setattr(exploration, "hold_certified_rates", measured_then_held)
    scn = _certified_on_two_types()
    plan = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), mixed_traffic().select_total(at_most=16384), 40.0)
    # (the TTFT sweep's rows are other targets' capacities, each scaled by its pair's measured ratio;
    # the plan's own rows are the plan, certified as it is)
    rows = [(o.name, o.solution.option, p) for o in (*plan.split_analysis, *plan.levers, *plan.alternatives,
                                                     *plan.sensitivity)
            if o.feasible and o.solution is not plan.solution for p in o.solution.pools]
    seen = {"measured": 0, "held": 0}
    for name, option, p in rows:
        k = (option, p.traffic_class, p.config)
        if k in halves:
            assert p.capacity_rps <= halves[k] * (1 + 1e-9), (name, p)
            seen["measured"] += 1
        elif k in held:
            assert p.capacity_rps >= held[k] * (1 - 1e-9), (name, p)
            seen["held"] += 1
    assert seen["measured"] and seen["held"]  # both kinds of pool are planned in the rows


def test_the_context_lever_prices_a_class_it_shares_with_the_plan_by_that_class_s_measurements():
    """The lower limit's one class (no split at 4,096) is the plan's short class of its split at 4,096:
    the same requests, limit and targets. It is priced by that class's measured ratio and pairs, under
    its own option and name; inventory_mixed's lever had planned such a class's l40s at the model's
    6.51 requests/s where certification had measured 5.99. A class the plan has not (the lower limit's
    long class of a split at 2,048 reaches 4,096, the plan's 16,384) takes nothing."""
    from planner.exploration import _twins_measured

    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 16384,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 60}]}, "gpus": ["l40s"], "split_thresholds": [2048, 4096],
    })
    served = mixed_traffic().select_total(at_most=16384)
    plan_classes = traffic_classes(scn, served, 16384, 40.0)
    lowered = served.select_total(at_most=4096)
    lower_classes = traffic_classes(scn, lowered, 4096, 40.0 * lowered.requests / served.requests)
    calibration = {("4096", "short", 4096): 0.9, ("2048", "short", 2048): 0.8, ("2048", "long", 16384): 0.7}
    measured = {("l40s-cfg", ("4096", "short", 4096)): 0.85, ("l40s-cfg", ("2048", "long", 16384)): 0.6}
    twin_calibration, twins, twin_measured = _twins_measured(lower_classes, plan_classes, calibration, measured)
    assert twin_calibration == {("none", "all", 4096): 0.9, ("2048", "short", 2048): 0.8}
    assert twin_measured == {("l40s-cfg", ("none", "all", 4096)): 0.85}
    assert sorted((tc.option, tc.name) for tcs in twins.values() for tc in tcs) == [("2048", "short"), ("none", "all")]


def test_a_recalibrated_search_keeps_variants_proved_below_a_sibling_unsearched(catalog, monkeypatch):
    """Certification lowers a class's calibration and the plan is asked again: the lazy search reads
    its pairs again with the new calibration, and a dtype variant evaluate_all proved below its
    sibling stays proved (the class scales as a whole), not searched after all."""
    import planner.evaluator as evaluator_module
    import planner.plan_search as plan_search
    from planner.plan_search import LazySearch, Resolver
    from planner.plan_setup import setup_plan

    # The lazy search's own searches: prefer_precise sizes the plan's more precise twins on purpose.
    monkeypatch.setattr(plan_search, "prefer_precise", lambda sol, *_: (sol, {}))
    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 65536,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 20, "tpot_ms": 80}]}, "gpus": ["h100-sxm"], "tp": [1],
        "weight_dtypes": ["bf16", "fp8"], "kv_dtypes": ["bf16", "fp8"], "verify": False,
    })
    st = setup_plan(scn, catalog, catalog.model("llama-3.1-8b"), mixed_traffic(), 20.0)
    dominated = {e.key for e in st.evals if e.dominated_by}
    assert dominated
    search = LazySearch(st.evaluator, Resolver(scn), st.classes, st.configs)
    before = search.solve()
    used = next(e for e in st.evals if e.key == (before.option, before.pools[0].traffic_class, before.pools[0].config))
    st.evaluator.record_simulated(used, used.capacity.max_rps * 0.5)
    searched = []
    original = evaluator_module.replica_capacity
    monkeypatch.setattr(evaluator_module, "replica_capacity", lambda *a, **k: searched.append(1) or original(*a, **k))
    after = search.solve()
    assert not searched
    assert {e.key for e in search.evaluations() if e.dominated_by} == dominated
    sized = [e for e in search.evaluations() if e.traffic_class is used.traffic_class
             and e.capacity is not None and e.capacity.max_rps > 0]
    assert sized and all(e.capacity_rps == pytest.approx(e.capacity.max_rps * 0.5, rel=1e-12) for e in sized)
    assert after is not before and after.cost_per_hour >= before.cost_per_hour  # asked again, capacities lower


@pytest.mark.parametrize("peak_rps", [4.0, 30.0, 90.0])
def test_a_plan_quantises_the_kv_cache_only_where_that_saves(catalog, peak_rps):
    """Dtype variants on the same GPUs cost the same, and the ILP sees only the one of highest
    capacity; where the more precise KV cache covers the pool with the same replicas, the plan runs
    it (a tie is no reason to quantise), and only where it would cost more does the plan quantise.
    Each pool's cache is checked against every variant's own capacity."""
    from planner.planning import make_plan

    def plan(kv_dtypes):
        scn = Scenario.model_validate({
            "name": "t", "model": "llama-3.1-8b", "context_limit": 16384,
            "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
            "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 50}]}, "sizing": {"mode": "percentile"},
            "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["fp8"], "kv_dtypes": kv_dtypes,
            "split_thresholds": [], "verify": False,
        })
        return make_plan(scn, catalog, catalog.model("llama-3.1-8b"), mixed_traffic(), peak_rps, explore=False)

    both, precise_only, quantised_only = plan(["bf16", "fp8"]), plan(["bf16"]), plan(["fp8"])
    assert both.cost_per_hour == min(precise_only.cost_per_hour, quantised_only.cost_per_hour)
    [pool] = both.pools
    ties = precise_only.cost_per_hour == both.cost_per_hour
    assert pool.config.kv_dtype == ("bf16" if ties else "fp8")
    assert pool.replicas == (precise_only if ties else quantised_only).pools[0].replicas


def test_a_next_best_plan_is_never_the_plan_itself_on_another_dtype(catalog):
    """The plan runs the precise twin of the variant the ILP chose; excluding the plan for the
    next-best ones must exclude what the ILP sees in its place, or the next best is the plan again."""
    from planner.plan_search import outcome_of
    from planner.planning import make_plan

    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 16384,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 50}]}, "sizing": {"mode": "percentile"},
        "gpus": ["h100-sxm", "h200"], "tp": [1], "weight_dtypes": ["fp8"], "kv_dtypes": ["bf16", "fp8"],
        "split_thresholds": [], "verify": False,
    })
    plan = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), mixed_traffic(), 4.0)
    [pool] = plan.pools
    assert pool.config.kv_dtype == "bf16"  # one replica of either cache covers 4.8 req/s
    mine = outcome_of("plan", plan.solution).summary
    assert plan.alternatives and all(o.summary != mine for o in plan.alternatives)
    assert all(o.cost_per_hour >= plan.cost_per_hour for o in plan.alternatives)


def test_a_simulated_capacity_calibrates_the_class_and_a_log_lowered_rate_does_not(catalog):
    """Certification bisects one config's capacity: that pair is planned by simulation, and the class's
    other configs at the model's capacity times the ratio found (planned_by "calibration", the factor
    the report and JSON show). A rate lowered after the log's own arrivals missed is no
    simulated capacity: its pair says so ("log") and the class's other configs keep the model's."""
    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 50}]}, "gpus": ["h100-sxm"], "tp": [1, 2],
        "weight_dtypes": ["bf16"], "kv_dtypes": ["bf16"], "split_thresholds": [],
    })
    model = catalog.model("llama-3.1-8b")
    classes = traffic_classes(scn, Histogram.constant(1000, 200, 100), 8192, 20.0)
    (tc,) = classes["none"]
    one, two = candidate_configs(scn, catalog, model, ["bf16"], ["bf16"])
    for calibrates, planned_by in ((True, "simulation"), (False, "log")):
        ev = Evaluator(scn, catalog, model)
        a, b = ev.evaluate(one, tc), ev.evaluate(two, tc)
        ev.record_simulated(a, a.capacity.max_rps * 0.8, calibrates=calibrates)
        a, b = ev.evaluate(one, tc), ev.evaluate(two, tc)
        assert a.planned_by == planned_by and a.capacity_rps == pytest.approx(a.capacity.max_rps * 0.8)
        if calibrates:
            assert b.planned_by == "calibration" and b.calibration == pytest.approx(0.8)
            assert b.capacity_rps == pytest.approx(b.capacity.max_rps * 0.8)
        else:
            assert b.planned_by == "model" and b.capacity_rps == b.capacity.max_rps


def test_a_simulated_capacity_of_zero_rules_out_its_pair_and_calibrates_nothing(catalog):
    """Certification found no rate at which one config held its targets (its bisection reached 0): the
    class's ratio became 0, every config of the class was priced at 0, and the lazy search divided by
    it (ZeroDivisionError, a traceback and exit 1, in an outside probe's TTFT sweep). The 0 is that
    pair's: it is planned at 0 (no plan takes it), and the class's other configs keep the model's."""
    from planner.plan_search import LazySearch, Resolver

    scn = Scenario.model_validate({
        "name": "t", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1, "output_tokens": 1}}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 50}]}, "gpus": ["h100-sxm", "l40s", "h200", "a100-80gb"],
        "tp": [1, 2], "weight_dtypes": ["bf16", "fp8"], "kv_dtypes": ["bf16"], "split_thresholds": [],
    })
    model = catalog.model("llama-3.1-8b")
    classes = traffic_classes(scn, Histogram.constant(1000, 200, 100), 8192, 20.0)
    (tc,) = classes["none"]
    configs = candidate_configs(scn, catalog, model, ["bf16", "fp8"], ["bf16"])
    ev = Evaluator(scn, catalog, model)
    first = ev.evaluate(configs[0], tc)
    ev.record_simulated(first, 0.0)
    assert ev.calibration_of(tc) == 1.0
    assert ev.evaluate(configs[0], tc).capacity_rps == 0.0
    # the lazy search (enough pairs unsearched for it: plan_search.LAZY_MIN_PAIRS), whose bounds the class's
    # ratio scales, plans without the pair, as the full ILP does; the other pairs stand at the model's
    search = LazySearch(ev, Resolver(scn), classes, configs)
    assert search.bound  # searching lazily, not every pair at once
    sol = search.solve()
    assert sol.pools and first.config.label(8192) not in {pool.config for pool in sol.pools}
    for cfg in configs[1:]:
        other = ev.evaluate(cfg, tc)
        assert other.planned_by == "model" and other.capacity_rps == other.capacity.max_rps


@pytest.mark.parametrize(("class_ratio", "pair", "pair_ratio"), [
    (0.8, ("h100-sxm", 2, "fp8", "fp8"), 0.98),
    (0.6, ("l40s", 1, "fp8", "bf16"), 1.0),
])
def test_a_pair_s_own_ratio_keeps_both_searches_exact(monkeypatch, class_ratio, pair, pair_ratio):
    """A TTFT sweep plans a measured pair at its own simulated / model ratio, above its class's least
    (Evaluator.calibrate). The lazy search's bounds took the class's ratio, so a bound could sit below
    the pair's planned capacity ($132.12 lazily against $130.72 with every pair searched, on
    inventory_mixed); and evaluate_all compared a group's dtype variants by model capacity, proving
    a variant below its sibling that is planned above it ($186.72 against $163.92). Both now read each
    pair at its own ratio (Evaluator.factor_of): either search costs what evaluating every pair costs."""
    from pathlib import Path

    import planner.plan_search as plan_search
    from planner.inputs import load_inputs
    from planner.plan_search import LazySearch, Resolver
    from planner.plan_setup import setup_plan

    inputs = load_inputs(Path(__file__).resolve().parent.parent / "scenarios" / "inventory_mixed.yaml")
    scn, traffic = inputs.scenario, inputs.traffic
    st = setup_plan(scn, inputs.catalog, inputs.model, traffic.hist, traffic.peak_rps, evaluate=False)
    classes, configs = st.classes, st.configs
    ratios = {(tc.option, tc.name, tc.max_model_len): class_ratio for tcs in classes.values() for tc in tcs}
    tc = classes["none"][0]
    measured = {(pair, (tc.option, tc.name, tc.max_model_len)): pair_ratio}
    assert any(cfg.key == pair for cfg in configs)

    def evaluator():
        ev = Evaluator(scn, inputs.catalog, inputs.model)
        ev.calibrate(ratios, classes, measured, configs)
        return ev

    costs = []
    for threshold in (0, 10**9):  # searched lazily; every pair evaluated at once (evaluate_all)
        monkeypatch.setattr(plan_search, "LAZY_MIN_PAIRS", threshold)
        costs.append(LazySearch(evaluator(), Resolver(scn), classes, configs).solve().cost_per_hour)
    ev = evaluator()
    every = [ev.evaluate(cfg, t) for tcs in classes.values() for t in tcs for cfg in configs]  # no pair proved below another
    costs.append(Resolver(scn)(classes, every).cost_per_hour)
    assert costs[0] == pytest.approx(costs[2], abs=1e-9) and costs[1] == pytest.approx(costs[2], abs=1e-9), costs
