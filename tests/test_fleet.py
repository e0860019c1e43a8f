"""A fleet of services in one ILP: brute force, splits of a shared cap, per-service sections, the
fleet file's errors, its JSON and its forecast."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pulp
import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main
from planner.commitments import committed_after_end_usd
from planner.ilp import (
    Candidate,
    ServiceModel,
    SplitOption,
    _build,
    cost_bound_using_more,
    solve_fleet,
    solve_services,
)
from planner.ilp_solver import COST_TOLERANCE_USD, fix_by_reduced_costs, solver_for
from planner.units import usd_text

# ------------------------------------------------------------------ the joint ILP


def random_service(rng, name: str, gpus: dict[str, float]) -> ServiceModel:
    options = [SplitOption("none", None, {"all": float(rng.uniform(1, 25))})]
    if rng.random() < 0.6:
        total, share = float(rng.uniform(1, 25)), float(rng.uniform(0.02, 0.3))
        options.append(SplitOption("8192", 8192, {"short": total * (1 - share), "long": total * share}))
    cands = []
    for o in options:
        for k in o.class_rates_rps:
            for g, price in gpus.items():
                for tp in (1, 2):
                    if rng.random() < 0.3:
                        continue
                    cap = float(rng.uniform(0.3, 9)) * tp ** rng.uniform(0.6, 1.3)
                    cands.append(Candidate(o.key, k, f"{g}-tp{tp}", g, tp, price * tp, cap))
    return ServiceModel(name, options, cands, {}, int(rng.integers(1, 3)))


def cheapest_replicas_plans(sv: ServiceModel):
    """Every plan of one service with homogeneous pools and the fewest replicas each, as
    (option, [(candidate, replicas) per class])."""
    for o in sv.options:
        per_class = []
        for k, rate in o.class_rates_rps.items():
            mine = [c for c in sv.candidates if c.option == o.key and c.traffic_class == k]
            per_class.append([(c, max(sv.min_replicas, math.ceil(rate / c.capacity_rps - 1e-12))) for c in mine])
        for combo in itertools.product(*per_class):
            yield o, combo


def service_plans(sv: ServiceModel):
    """Every plan of one service with homogeneous pools and the fewest replicas each: (GPUs by type, cost by type)."""
    out = []
    for _, combo in cheapest_replicas_plans(sv):
        gpus: dict[str, int] = {}
        cost: dict[str, float] = {}
        for c, n in combo:
            gpus[c.gpu] = gpus.get(c.gpu, 0) + n * c.gpus_per_replica
            cost[c.gpu] = cost.get(c.gpu, 0.0) + n * c.cost_per_replica_hour
        out.append((gpus, cost))
    return out


def brute_force(services, caps, committed, prices, at_least=None):
    best = math.inf
    for plans in itertools.product(*(service_plans(sv) for sv in services)):
        used: dict[str, int] = {}
        cost = 0.0
        for gpus, c in plans:
            for g, n in gpus.items():
                used[g] = used.get(g, 0) + n
            cost += sum(v for g, v in c.items() if g not in committed)
        if any(used.get(g, 0) > cap for g, cap in caps.items()):
            continue
        if any(used.get(g, 0) < n for g, n in (at_least or {}).items()):
            continue
        for g, (n, q) in committed.items():
            cost += n * q + prices[g] * max(0, used.get(g, 0) - n)
        best = min(best, cost)
    return best


def instance(seed: int):
    rng = np.random.default_rng(500 + seed)
    prices = {"scarce": 2.0, "plenty": float(rng.choice([2.6, 3.4, 4.1]))}
    services = [random_service(rng, f"s{i}", prices) for i in range(2)]
    cap = int(rng.integers(2, 14))
    committed = {"scarce": (int(rng.integers(1, cap + 1)), 1.2)} if seed % 3 == 0 else {}
    return services, {"scarce": cap}, committed, prices


@pytest.mark.parametrize("seed", range(24))
def test_two_services_competing_for_a_capped_type_match_brute_force(seed):
    """One ILP for two services sharing a capped GPU type (and, every third seed, committed GPUs of
    it) finds the optimum that enumerating every pair of plans finds."""
    services, caps, committed, prices = instance(seed)
    expected = brute_force(services, caps, committed, prices)
    for backend in ("cbc", "highs"):
        joint = solve_services(services, inventory=caps, reserved=committed, reserved_pools=False, backend=backend)
        if not math.isfinite(expected):
            assert joint.status == "Infeasible"
            continue
        assert joint.status == "Optimal"
        assert joint.cost_per_hour == pytest.approx(expected, abs=1e-6)
        used = sum(p.gpus for sol in joint.services for p in sol.pools if p.gpu == "scarce")
        assert used <= caps["scarce"]


@pytest.mark.parametrize("seed", range(24))
def test_the_bound_on_plans_over_a_cap_is_below_every_such_plan(seed):
    """What a cap costs is not re-solved when the linear relaxation of the plans it forbids costs no
    less than the plan: that bound must lie below every plan with more GPUs of the type than the
    cap (enumerated), and dropping the cap must then change nothing."""
    services, caps, committed, prices = instance(seed)
    over = caps["scarce"] + 1
    bound = cost_bound_using_more(services, "scarce", over, reserved=committed)
    cheapest_over = brute_force(services, {}, committed, prices, at_least={"scarce": over})
    assert bound <= cheapest_over + 1e-6
    capped = solve_services(services, inventory=caps, reserved=committed)
    if capped.services[0].pools and bound >= capped.cost_per_hour - 1e-6:
        dropped = solve_services(services, reserved=committed)
        assert dropped.cost_per_hour == pytest.approx(capped.cost_per_hour, abs=1e-6)


@pytest.mark.parametrize("seed", range(24))
def test_the_joint_plan_costs_no_more_than_any_split_of_the_cap_planned_apart(seed):
    """Planned apart, each service gets a share of the cap; the joint plan is never dearer than any
    split, and as cheap as the best split (a joint plan is one of the splits)."""
    services, caps, _, _ = instance(seed)
    cap = caps["scarce"]
    joint = solve_services(services, inventory=caps)
    apart = []
    for k in range(cap + 1):
        a, b = (solve_fleet(sv.options, sv.candidates, inventory={"scarce": share}, min_replicas=sv.min_replicas)
                for sv, share in zip(services, (k, cap - k), strict=True))
        apart.append(a.cost_per_hour + b.cost_per_hour if a.pools and b.pools else math.inf)
    assert all(joint.cost_per_hour <= c + 1e-6 for c in apart)
    assert joint.cost_per_hour == pytest.approx(min(apart), abs=1e-6) if math.isfinite(min(apart)) else not joint.services[0].pools


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_ties_across_services_prefer_fewer_pools_before_lower_split_thresholds(backend):
    """Same cost, same GPUs: the fleet with fewer pools wins even when its services' split
    thresholds add up to far higher ranks (5 here, more than any service has options). One GPU
    type for the fleet forces a choice: on "b", the first service runs one pool and the others
    their highest threshold; on "a", the first splits (one pool more) and the others run their
    lowest threshold ("c" is dearer)."""
    first = ServiceModel("s0", [SplitOption("none", None, {"all": 2.0}),
                                SplitOption("8192", 8192, {"short": 1.0, "long": 1.0})],
                         [Candidate("none", "all", "b1", "b", 1, 1.0, 1.0)]
                         + [Candidate("8192", k, "a1", "a", 1, 1.0, 1.0) for k in ("short", "long")])
    thresholds = (4096, 8192, 16384)
    others = [ServiceModel(f"s{i}", [SplitOption(str(t), t, {"short": 1.0, "long": 1.0}) for t in thresholds],
                           [Candidate("4096", k, "a1", "a", 1, 1.0, 1.0) for k in ("short", "long")]
                           + [Candidate("8192", k, "c1", "c", 1, 5.0, 1.0) for k in ("short", "long")]
                           + [Candidate("16384", k, "b1", "b", 1, 1.0, 1.0) for k in ("short", "long")])
              for i in range(1, 4)]
    joint = solve_services([first, *others], max_gpu_types=1, backend=backend)
    assert joint.status == "Optimal" and joint.gpus == 8 and joint.cost_per_hour == pytest.approx(8.0)
    assert [s.option for s in joint.services] == ["none", "16384", "16384", "16384"]
    assert sum(len(s.pools) for s in joint.services) == 7


# ------------------------------------------------------------------ fleet files


def service(name: str, rps: float, **kw) -> dict:
    base = {
        "name": name, "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1500, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": rps}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 60}]}, "sizing": {"mode": "expected"},
        "gpus": ["h100-sxm", "l40s"], "tp": [1], "weight_dtypes": ["bf16"], "kv_dtypes": ["bf16", "fp8"],
        "verify": False, "solver": {"backend": "highs"},
    }
    base.update(kw)
    return base


def write_fleet(tmp_path: Path, **kw) -> Path:
    doc = {"name": "twin", "services": [service("alpha", 30.0), service("beta", 12.0)], "solver": {"backend": "highs"}}
    doc.update(kw)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_each_service_section_is_its_own_report_when_no_shared_constraint_binds(tmp_path):
    """With a shared cap far above what the fleet uses, every service's section of the fleet report
    is its own single-scenario report (one heading level down), explorations included."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import demote, service_section
    from planner.inputs import plan_inputs, report_sections
    from planner.report import render

    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 1000}})
    fleet = load_fleet(path)
    fp = make_fleet_plan(fleet)
    assert not any(c.binds for c in fp.constraints)
    for i, svc in enumerate(fleet.services):
        figures = {"traffic": "t.png", "split": "s.png", "ttft": "x.png"}
        alone = plan_inputs(svc.inputs)
        own = demote(render(alone, figures=figures, sections=report_sections(alone, svc.inputs).texts))
        assert service_section(fp, i, figures) == own
        assert alone.cost_per_hour == pytest.approx(fp.plans[i].cost_per_hour)
    assert fp.cost_per_hour == pytest.approx(sum(p.cost_per_hour for p in fp.plans))


def test_a_fleets_ttft_sweeps_start_while_its_ilp_breaks_ties_and_answer_as_if_started_after(tmp_path, monkeypatch):
    """Each service's TTFT sweep starts in the worker while the joint ILP breaks its ties
    (fleet_plan._EarlySweeps), and is taken where the plan leaves the service the rules it started
    with; else it is dropped (the worker skips it) and started again. Either way the rows are those
    of sweeps started once the plan is made."""
    from planner import exploration, fleet_plan, ilp
    from planner.exploration import TTFT_SWEEP
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.worker_pool import worker_processes

    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 64}, "l40s": {"max_new": 64}})
    started, taken, dropped = [], [], []
    start_sweep, start_early = fleet_plan.start_ttft_sweep, fleet_plan._EarlySweeps.start
    take, drop = fleet_plan._EarlySweeps.take, exploration.StartedSweep.drop
    monkeypatch.setattr(fleet_plan, "start_ttft_sweep", lambda st, solve: started.append(1) or start_sweep(st, solve))
    monkeypatch.setattr(fleet_plan._EarlySweeps, "take", lambda self, i, solve: taken.append(take(self, i, solve)) or taken[-1])
    monkeypatch.setattr(exploration.StartedSweep, "drop", lambda self: dropped.append(1) or drop(self))
    twins, break_ties = [], ilp.break_ties
    monkeypatch.setattr(ilp, "break_ties", lambda *a, keep_twin: twins.append(keep_twin) or break_ties(*a, keep_twin=keep_twin))

    def rows():
        for seen in (started, taken, dropped, twins):
            seen.clear()
        with worker_processes():
            fp = make_fleet_plan(load_fleet(path))
        return [[(m, o.name, o.feasible, o.cost_per_hour, o.gpus, o.summary, o.why_not) for m, o in p.ttft_sweep]
                for p in fp.plans]

    early = rows()
    assert len(started) == 2 and all(taken) and len(taken) == 2 and not dropped  # started during the tie-break, taken
    assert twins[0] and not any(twins[1:])  # the fleet's plan keeps the optimum its sweeps started from, if a twin
    assert all(len(sweep) == len(TTFT_SWEEP) - 1 for sweep in early)

    monkeypatch.setattr(fleet_plan._EarlySweeps, "start", lambda self, optimum: True)
    assert rows() == early and len(started) == 2 and taken == [None, None]  # each started after the plan

    def start_with_other_rules(self, optimum):
        start_early(self, optimum)
        self.started = {i: (((), None), sweep) for i, (_, sweep) in self.started.items()}
        return True

    monkeypatch.setattr(fleet_plan._EarlySweeps, "start", start_with_other_rules)
    assert rows() == early and len(started) == 4 and taken == [None, None] and len(dropped) == 2  # dropped, started again

    monkeypatch.setattr(fleet_plan._EarlySweeps, "start", start_early)
    cbc = {"backend": "cbc"}
    path = write_fleet(tmp_path, services=[service("alpha", 30.0, solver=cbc), service("beta", 12.0, solver=cbc)],
                       inventory={"h100-sxm": {"max_new": 64}, "l40s": {"max_new": 64}}, solver=cbc)
    assert rows() == early and len(started) == 2 and not taken  # CBC's joint ILP: started after the plan
    assert twins and not any(twins)


def test_what_a_service_takes_of_the_others_plans_leaves_out_caps_it_cannot_reach(tmp_path):
    """What a service's re-solves alone take of the others' plans is its own GPU candidates' caps and
    the rule on types (fleet_plan._rules_of): a cap that moved on a type it cannot run, or that stays
    above its own max_gpus, leaves its early sweep as good as one started after the plan (taken)."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import _alone, _EarlySweeps, _rules_of, _setup

    alpha = service("alpha", 30.0, gpus=[{"id": "h100-sxm", "max_gpus": 8}])
    path = write_fleet(tmp_path, services=[alpha, service("beta", 12.0)],
                       inventory={"h100-sxm": {"max_new": 64}, "l40s": {"max_new": 64}})
    fleet = load_fleet(path)
    setups = [_setup(svc, 1.0, None) for svc in fleet.services]

    def rules(beta_runs):
        return _rules_of(_alone(fleet, setups, [{}, beta_runs], 0)[1])

    assert rules({"l40s": 10}) == rules({"l40s": 30}) == rules({"h100-sxm": 40, "l40s": 2})  # alpha runs no l40s
    assert rules({"h100-sxm": 40}) == ((fleet.services[0].inputs.scenario.gpu_candidates[0].model_copy(
        update={"max_gpus": 8}),), None)
    assert rules({"h100-sxm": 60}) != rules({"h100-sxm": 40})  # 4 left: below its own 8
    early = _EarlySweeps(fleet, setups)
    started = object()  # the sweep started with beta running 10 L40S
    early.started = {0: (rules({"l40s": 10}), started)}
    assert early.take(0, _alone(fleet, setups, [{}, {"h100-sxm": 60}], 0)[1]) is None  # other caps: not taken
    assert early.take(0, _alone(fleet, setups, [{}, {"l40s": 30}], 0)[1]) is started and not early.started


@pytest.mark.parametrize("reserved", [0, 8])
def test_a_services_day_in_a_fleet_with_commitments_says_it_is_priced_alone(tmp_path, reserved):
    """(An outside probe: 8 reserved H100s, 3 idle, and a service's day priced on demand at $4,365.40 a month,
    with autoscaling said to save 22.6%, where the fleet pays $3,058.70 a month for it.)"""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import service_section

    traffic = {"source": {"constant": {"prompt_tokens": 1500, "output_tokens": 200}},
               "peak": {"method": "explicit", "rps": 12.0}, "mean_rps": 6.0,
               "profile": {"shape": "diurnal", "peak_to_trough": 3, "peak_hour": 14}}
    inventory = {"h100-sxm": {"reserved": reserved, "reserved_usd_per_hour": 2.093}} if reserved else {}
    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, services=[service("alpha", 30.0), service(
        "beta", 12.0, traffic=traffic, gpus=["h100-sxm"])], inventory=inventory)))
    text = service_section(fp, 1)
    assert "## The day's load curve" in text
    note = (f"In this fleet, the day above is priced as if beta ran alone, at its own on-demand prices: the fleet holds committed "
            f"h100-sxm GPUs, which this service runs on and which are paid all day whether used or not (autoscaling "
            f"saves nothing on them); as the fleet pays, the service costs {usd_text(fp.paid_usd_per_hour(fp.plans[1]))}"
            "/hour at its peak (the fleet's totals).")
    assert (note in text) == bool(reserved)
    assert note not in service_section(fp, 0)  # no day priced


@pytest.mark.parametrize("gpus", [["h100-sxm"], [{"id": "h100-sxm", "max_gpus": 100}]])
def test_a_service_of_a_fleet_without_limits_is_its_own_report_with_an_infeasible_row_too(tmp_path, gpus):
    """On one GPU type, "without h100-sxm" is infeasible in the service's own report; with no cap,
    commitment or rule in the fleet that row once added a paragraph on how the fleet re-solves it (and
    still did where the service caps the type itself, a cap its own report has too)."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import _totals, demote, service_section
    from planner.inputs import plan_inputs, report_sections
    from planner.report import render

    fleet = load_fleet(write_fleet(tmp_path, services=[service("solo", 20.0, gpus=gpus)]))
    fp = make_fleet_plan(fleet)
    figures = {"traffic": "t.png", "split": "s.png", "ttft": "x.png"}
    alone = plan_inputs(fleet.services[0].inputs)
    assert any(not o.feasible for o in alone.levers)  # the row that set it off
    own = demote(render(alone, figures=figures, sections=report_sections(alone, fleet.services[0].inputs).texts))
    assert service_section(fp, 0, figures) == own
    assert "**1 service on " in _totals(fp)


def test_a_fleets_figures_are_started_while_it_is_planned_and_its_report_starts_no_job(tmp_path, monkeypatch):
    """`planner solve FLEET` starts each service's traffic figure once every service is set up (the
    worker shares their evaluations first) and its other figures once what they show is known, with the
    arguments its report gives them: writing the report then sends the worker no job, and its files
    are those drawn with no worker at all."""
    import pickle

    from planner import fleet_plan, fleet_report, worker_pool

    events = []
    submit, setup_plan, start_figures = worker_pool._Worker.submit, fleet_plan.setup_plan, fleet_report.start_figures

    def sent(self, payload, **kw):
        events.append(("job", pickle.loads(payload)[0]))
        return submit(self, payload, **kw)

    def set_up(*a, **kw):
        st = setup_plan(*a, **kw)
        events.append(("set up",))
        return st

    monkeypatch.setattr(worker_pool._Worker, "submit", sent)
    monkeypatch.setattr(fleet_plan, "setup_plan", set_up)
    monkeypatch.setattr(fleet_report, "start_figures", lambda *a, **kw: events.append(("report",)) or start_figures(*a, **kw))
    path = write_fleet(tmp_path, services=[service("alpha", 30.0), service("beta", 12.0, context_limit=4096)])
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "ahead"), "--no-verify"])
    assert r.exit_code == 0, r.output
    figures = [i for i, e in enumerate(events) if e[0] == "job" and e[1].startswith("figures:")]
    kinds = [events[i][1] for i in figures]
    assert sorted(kinds) == ["figures:cost_figure"] * 2 + ["figures:target_figure"] * 2 + ["figures:traffic_figure"] * 2
    last_setup = max(i for i, e in enumerate(events) if e == ("set up",))
    first_report = min(i for i, e in enumerate(events) if e == ("report",))
    assert last_setup < min(figures) and max(figures) < first_report
    assert [e for e in events[first_report:] if e[0] == "job"] == []
    monkeypatch.setenv("PLANNER_WORKERS", "0")
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "here"), "--no-verify"])
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in (tmp_path / "ahead").iterdir())
    assert len(files) == 7 and files == sorted(p.name for p in (tmp_path / "here").iterdir())
    assert all((tmp_path / "ahead" / f).read_bytes() == (tmp_path / "here" / f).read_bytes() for f in files)


def test_a_binding_cap_moves_a_service_and_its_cost_is_the_saving_without_it(tmp_path):
    """Two services want the cheaper H100; a cap one GPU below what they take alone makes one of
    them take L40S. Dropping the cap costs exactly the two services planned alone; raising it by one
    GPU is re-solved too."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.inputs import plan_inputs

    unlimited = load_fleet(write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 1000}}))
    plans_alone = [plan_inputs(svc.inputs, explore=False) for svc in unlimited.services]
    h100_alone = [sum(pd.gpus for pd in p.pools if pd.config.gpu.id == "h100-sxm") for p in plans_alone]
    assert min(h100_alone) >= 1  # both want the H100 alone
    limit = sum(h100_alone) - 1
    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": limit}})
    fleet = load_fleet(path)
    fp = make_fleet_plan(fleet, explore=True)
    [cap] = fp.constraints
    assert cap.binds and cap.used == limit
    alone = sum(p.cost_per_hour for p in plans_alone)
    assert cap.removed_usd_per_hour == pytest.approx(alone)
    assert fp.cost_per_hour > alone
    assert cap.removed_usd_per_hour <= cap.plus_one_usd_per_hour <= fp.cost_per_hour
    assert sum(pd.gpus for p in fp.plans for pd in p.pools if pd.config.gpu.id == "h100-sxm") == limit
    from planner.fleet_report import _constraints

    # Nothing was certified here: the re-solves' capacities are the model's, and the report says so.
    assert not any(p.certification for p in fp.plans)
    assert "by the model (no service was certified by simulation; these re-solves" in _constraints(fp)


def test_limits_priced_side_by_side_cost_what_they_cost_one_after_another(tmp_path, monkeypatch):
    """The shared limits are priced in threads of their own (worker_pool.side_by_side): each limit's
    answer is the one its re-solves give run one after another, in the limits' order."""
    import planner.fleet_plan as fleet_plan
    from planner.fleet import load_fleet
    from planner.worker_pool import side_by_side

    priced = []

    def checked(job, items):
        items = list(items)
        answers = side_by_side(job, items)
        assert answers == [job(item) for item in items]
        priced.append(len(items))
        return answers

    monkeypatch.setattr(fleet_plan, "side_by_side", checked)
    fleet = load_fleet(write_fleet(tmp_path, max_gpu_types=1,
                                   inventory={"h100-sxm": {"max_new": 3}, "l40s": {"max_new": 40}}))
    fp = fleet_plan.make_fleet_plan(fleet)
    assert priced == [3] and [c.name for c in fp.constraints] == ["h100-sxm GPUs", "l40s GPUs", "GPU types"]


def _re_solves_stop_at_their_time_limit(monkeypatch) -> None:
    """Every re-solve of a limit (fleet_plan._solve without its tie-break) stops at its time limit on
    a fleet $50/hour dearer than the relaxed optimum; the plan's own solve is left as it is."""
    import dataclasses

    import planner.fleet_plan as fleet_plan

    real = fleet_plan._solve

    def stopped(*args, **kw):
        joint = real(*args, **kw)
        if kw.get("tie_break", True):
            return joint
        return dataclasses.replace(joint, status="Feasible (time limit, not proven optimal)",
                                   cost_per_hour=joint.cost_per_hour + 50.0)

    monkeypatch.setattr(fleet_plan, "_solve", stopped)


def test_a_re_solve_stopped_by_its_time_limit_is_never_priced_above_the_plan_and_is_marked(tmp_path, monkeypatch):
    """A relaxed limit still allows the plan, so a re-solve that stops at solver.time_limit_s on a
    dearer fleet has not found the relaxed optimum: its cost is clamped to the plan's and the row is
    marked unproven. A 100-service fleet had shown one more H100 allowed costing $11.39/hour more, and
    a cap the plan stayed under "saving" $28/hour, both the solver's gap."""

    import planner.fleet_plan as fleet_plan
    from planner.fleet import load_fleet
    from planner.fleet_report import _constraints, fleet_json

    _re_solves_stop_at_their_time_limit(monkeypatch)
    fleet = load_fleet(write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 3}}, max_gpu_types=1))
    fp = fleet_plan.make_fleet_plan(fleet)
    assert fp.joint.status == "Optimal" and fp.constraints
    for c in fp.constraints:
        assert c.plus_one_usd_per_hour <= fp.cost_per_hour and c.removed_usd_per_hour <= fp.cost_per_hour
    unproven = [c for c in fp.constraints if not c.proven]
    assert unproven  # the limits a bound does not price out are re-solved
    text = _constraints(fp)
    assert "† Not proven: the plan's solve or a re-solve stopped at `solver.time_limit_s`" in text
    assert all(f"| {c.name} |" in line and line.count("†") == 4
               for c in unproven for line in text.splitlines() if line.startswith(f"| {c.name} |"))
    assert "Binds: the plan uses all" not in text and "yet dropping it saves" not in text
    assert [c["proven"] for c in fleet_json(fp)["constraints"]] == [c.proven for c in fp.constraints]


def test_a_plan_stopped_by_its_time_limit_proves_no_limit_s_price_and_says_so(tmp_path, monkeypatch):
    """The plan's own solve not proven optimal: every row is unproven, whatever its re-solves did,
    and the command's line names the status."""
    import dataclasses

    import planner.fleet_plan as fleet_plan
    from planner.fleet import load_fleet

    real = fleet_plan._solve
    status = "Feasible (time limit, not proven optimal)"

    def stopped(*args, **kw):  # the plan's solve (with its tie-break) stops; the re-solves do not
        joint = real(*args, **kw)
        return dataclasses.replace(joint, status=status) if kw.get("tie_break", True) else joint

    monkeypatch.setattr(fleet_plan, "_solve", stopped)
    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 3}}, max_gpu_types=1)
    fp = fleet_plan.make_fleet_plan(load_fleet(path))
    assert fp.constraints and not any(c.proven for c in fp.constraints)
    r = CliRunner().invoke(main, ["solve", str(path), "--no-verify", "--no-report"])
    assert r.exit_code == 0 and f"({status}: raise solver.time_limit_s)" in r.output.splitlines()[0], r.output


def test_the_shipped_fleet_forecast_ties_its_binding_cap_to_what_carry_forward_then_commits():
    """fleet_2027q1's 2027Q2 H100 cap sends load to other types on demand, which carry_forward then
    commits for a year: the cap's sentence names those commitments (the table's rows priced at the
    capped quarter's terms) and what they cost over their term, so the analyst sees what the cap signs."""
    from planner.units import HOURS_PER_QUARTER, usd_text

    root = Path(__file__).resolve().parent.parent
    md = (root / "reports" / "fleet_2027q1_forecast.md").read_text(encoding="utf-8")
    term = yaml.safe_load((root / "scenarios" / "fleet_2027q1.yaml").read_text(encoding="utf-8"))["forecast"][
        "commitment_term_quarters"]
    cap = next(line for line in md.splitlines() if line.startswith("At its cap ("))
    quarter = re.match(r"At its cap \((\d{4}Q\d) ", cap).group(1)
    rows = [line.split("|")[1:-1] for line in md.splitlines() if re.match(r"^\| \d{4}Q\d \| \d{4}Q\d \| \+", line)]
    lots = [(int(r[2].split()[0]), r[2].split()[1], float(r[3].strip().lstrip("$"))) for r in rows
            if r[5].strip() == quarter]
    assert len(lots) == 3 and {g for _, g, _ in lots} == {"h100-sxm", "h200", "l40s"}
    per_hour = sum(n * usd for n, _, usd in lots)
    assert (f"({quarter}'s " + ", ".join(f"{n} {g}" for n, g, _ in lots)
            + f", {usd_text(per_hour)}/hour, {usd_text(per_hour * HOURS_PER_QUARTER * term)} over its {term}-quarter "
            "term)") in cap


def test_a_binding_caps_commitments_are_what_carry_forward_takes_from_it_not_a_quarters_own_reserved(tmp_path):
    """The cap sentence names the next quarter's lots at the capped quarter's terms: what it ran beyond
    the commitments still in their term. The capped 2027Q2 reserves 20 L40S of its own (priced at its
    terms, from itself): an outside review found the first version counting them as "run on demand"."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_markdown, run_fleet_forecast
    from planner.units import HOURS_PER_QUARTER, usd_text

    slo = {"statistic": "p99", "bands": [{"ttft_s": 1.0, "tpot_ms": 50}]}
    path = write_fleet(
        tmp_path,
        services=[service(n, 15.0, slo=slo, traffic={"source": {"constant": {"prompt_tokens": 2000, "output_tokens": 300}},
                                                     "peak": {"method": "explicit", "rps": 15}}, kv_dtypes=["bf16"])
                  for n in ("a", "b")],
        inventory={"h100-sxm": {"reserved": 2, "reserved_usd_per_hour": 2.093, "max_new": 2}, "l40s": {"max_new": 200}},
        forecast={"carry_forward": True, "commitment_term_quarters": 4, "reserved_discount": 0.3,
                  "quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.3, "reserved": {"l40s": 20}},
                               {"quarter": "2027Q3", "growth": 0.3, "availability": {"h100-sxm": 40}}]})
    fleet = load_fleet(path)
    results = run_fleet_forecast(fleet)
    md = fleet_forecast_markdown("twin", results, fleet)
    capped = [r.quarter for r in results if any(t.cap is not None and t.used >= t.cap for t in r.plan.types)]
    assert capped[:2] == ["2027Q1", "2027Q2"]
    q2_own = [c for c in results[1].commitments if c.terms_quarter == "2027Q2"]
    assert q2_own and sum(c.gpus for c in q2_own) > 0  # 2027Q2's own reserved, from 2027Q2 at its terms
    carried = [c for c in results[1].commitments if c.terms_quarter == "2027Q1"]
    per_hour = sum(c.gpus * c.usd_per_gpu_hour for c in carried)
    sentence = next(line for line in md.splitlines() if line.startswith("At its cap ("))
    assert ("(2027Q1's " + ", ".join(f"{c.gpus} {c.gpu}" for c in carried)
            + f", {usd_text(per_hour)}/hour, {usd_text(per_hour * HOURS_PER_QUARTER * 4)} over its 4-quarter term)"
            ) in sentence  # the term the test's forecast states
    assert "2027Q2's" not in sentence  # it ran nothing beyond its commitments: it carries nothing forward


def test_the_shipped_finance_forecast_states_what_it_signs_and_what_its_dollars_rest_on():
    """A finance analyst's reading of finance_2027's forecast (an outside audit found these
    missing): the headline names what its reservations commit after the last quarter (the total
    CSV's committed_after_end_usd); every GPU type no quarter prices is given its on-demand price,
    the pools CSV's, with the discount that prices a commitment; and a synthetic sample's peak is
    not called measured."""
    import csv

    import yaml

    from planner.units import usd_rate_text, usd_text

    root = Path(__file__).resolve().parent.parent
    md = (root / "reports" / "finance_2027_forecast.md").read_text(encoding="utf-8")
    (total,) = csv.DictReader((root / "reports" / "finance_2027_forecast_total.csv").read_text().splitlines())
    headline = md.splitlines()[2]
    after = float(total["committed_after_end_usd"])
    assert after > 0 and headline.endswith(f"; the forecast's reservations already commit {usd_text(after)} more "
                                           f"after {total['last_quarter']}.**")
    pools = list(csv.DictReader((root / "reports" / "finance_2027_forecast_pools.csv").read_text().splitlines()))
    scn = yaml.safe_load((root / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    stated = {g for q in scn["forecast"]["quarters"] for g in q.get("prices", {})}
    basis = next(line for line in md.splitlines() if line.startswith("On-demand prices, per GPU-hour, in every quarter"))
    unstated = {p["gpu"]: float(p["on_demand_usd_per_gpu_hour"]) for p in pools if p["gpu"] not in stated}
    assert unstated and all(f"{g} {usd_rate_text(usd)} (the catalog's)" in basis for g, usd in unstated.items())
    discount = scn["forecast"]["reserved_discount"]
    assert ("A committed GPU is priced at the on-demand price of the quarter that commits it" in basis
            and f"× (1 − {discount:g}) (forecast.reserved_discount, the scenario's assumption)." in basis)
    assert "synthetic" in scn["traffic"]["source"] and "Peak req/s is the synthetic sample's peak" in md
    assert "measured peak" not in md


def test_the_shipped_finance_forecast_puts_the_plan_beside_the_cheapest_way_to_buy_its_fleets():
    """The day-curve table priced four ways of buying the plan's fleets and said they are not what the
    plan pays, without putting the two side by side (an outside reading: $455,986.47 against the
    cheapest way's $328,150.51). The line after it is rebuilt here from the total CSV: the plan's
    total, the cheapest way's, and what the plan's commitments cost after the last quarter."""
    import csv

    from planner.daily import POLICIES
    from planner.units import share_text, usd_text

    root = Path(__file__).resolve().parent.parent
    md = (root / "reports" / "finance_2027_forecast.md").read_text(encoding="utf-8")
    (total,) = csv.DictReader((root / "reports" / "finance_2027_forecast_total.csv").read_text().splitlines())
    plan = float(total["total_usd"])
    key, name = min(POLICIES, key=lambda kp: float(total[f"{kp[0]}_usd"]))
    way = float(total[f"{key}_usd"])
    assert key == "mixed" and way < plan  # the shipped forecast: reserving the base and buying the day saves
    said = (f"The forecast's plans pay {usd_text(plan)} over these quarters; the cheapest way here, {name}, costs "
            f"{usd_text(way)}: {usd_text(plan - way)} ({share_text((plan - way) / plan)} of the plans') less.")
    assert said in md
    after = float(total["committed_after_end_usd"])
    assert (f"on demand or at the commitments they carry, and their reservations commit {usd_text(after)} more after "
            f"{total['last_quarter']}; ") in md
    assert ("the cheapest way pays for its reservations in their own quarter alone, at the price of a commitment for "
            "the whole term, so what they would commit after it is not in its amount.") in md
    # the scenario's own report carries the same section, and the same line
    assert said in (root / "reports" / "finance_2027.md").read_text(encoding="utf-8")


def test_the_shipped_forecasts_show_each_price_and_count_one_way():
    """A type's average price as paid is shown as its prices are (usd_rate_text: all-committed h200s
    read $4.445, not $4.45 beside the commitments' $4.445), and reserved replicas of several GPU types
    are told apart (where a quarter reserves several): each read against the forecasts' own CSVs."""
    import csv

    from planner.units import usd_rate_text

    reports = Path(__file__).resolve().parent.parent / "reports"

    def rows(name):
        return list(csv.DictReader((reports / name).read_text(encoding="utf-8").splitlines()))

    fleet = (reports / "fleet_2027q1_forecast.md").read_text(encoding="utf-8")
    types = [t for t in rows("fleet_2027q1_forecast_types.csv") if int(t["gpus"])]
    assert any(float(t["paid_usd_per_gpu_hour"]) == 4.445 for t in types)
    for t in types:
        assert re.search(rf"^\| {t['quarter']} \| {t['gpu']} \| .* \| {re.escape(usd_rate_text(float(t['paid_usd_per_gpu_hour'])))} \|$",
                         fleet, re.M), t
    finance = (reports / "finance_2027_forecast.md").read_text(encoding="utf-8")
    by_quarter: dict[str, dict[str, int]] = {}
    for pool in rows("finance_2027_forecast_pools.csv"):
        if pool["mixed_reserved_replicas"]:
            kinds = by_quarter.setdefault(pool["quarter"], {})
            kinds[pool["gpu"]] = kinds.get(pool["gpu"], 0) + int(pool["mixed_reserved_replicas"])
    assert by_quarter
    for kinds in by_quarter.values():
        named = f": {', '.join(f'{n} {g}' for g, n in kinds.items())}" if len(kinds) > 1 else ""
        assert f"({sum(kinds.values())} reserved replicas{named})" in finance


def test_a_fleet_quarter_s_tokens_are_its_services_whole_tokens_summed():
    """Rounded on its own, the quarter's total was a token off its services' rounded values."""
    from types import SimpleNamespace

    from planner.fleet_forecast import QUARTER_COLUMNS

    (column,) = [c for c in QUARTER_COLUMNS if c.name == "tokens_per_hour_at_peak"]
    quarter = SimpleNamespace(plan=SimpleNamespace(plans=[SimpleNamespace(tokens_per_hour=1.4)] * 2))
    assert column.value(quarter) == 2  # 1 + 1, where round(2.8) is 3


def test_committed_gpus_are_paid_used_or_not_and_the_services_add_up(tmp_path):
    """Owned L40S are sunk: the fleet runs them before buying anything; what the services pay and the
    idle commitments add up to the fleet's cost."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan

    path = write_fleet(tmp_path, inventory={"l40s": {"owned": 40, "owned_usd_per_hour": 0.5}})
    fp = make_fleet_plan(load_fleet(path), explore=False)
    l40s = next(t for t in fp.types if t.gpu == "l40s")
    assert l40s.committed == 40 and l40s.committed_usd_per_hour == pytest.approx(20.0)
    paid = sum(fp.paid_usd_per_hour(p) for p in fp.plans) + fp.idle_committed_usd_per_hour
    assert paid == pytest.approx(fp.cost_per_hour)
    assert fp.cost_per_hour == pytest.approx(20.0 + sum(t.on_demand * t.on_demand_usd_per_gpu_hour for t in fp.types))
    # the headline counts the GPUs in use and, where commitments stand idle, those paid for
    from planner.fleet_report import render_fleet

    idle = sum(t.idle_committed for t in fp.types)
    assert idle == fp.idle_committed > 0
    assert f"on {fp.gpus} GPUs in use (" in render_fleet(fp) and f"; {fp.gpus + idle} paid for): " in render_fleet(fp)


def test_on_demand_gpus_of_a_reserved_type_are_priced_as_reservations_and_a_re_plan_saves_at_least_that(tmp_path):
    """The constraints table prices the caps, and a fleet planner deciding next quarter's reservations
    had to work out from the types table what more of them would save (an outside reading: one more
    reserved H100 in the shipped fleet saves $0.90 an hour). The totals now say it, per type; and the
    fleet re-planned with those GPUs reserved costs no more than the plan less the saving stated."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import fleet_json, render_fleet, reservation_savings
    from planner.units import HOURS_PER_MONTH, usd_rate_text, usd_text

    h100_only = {"gpus": ["h100-sxm"], "kv_dtypes": ["bf16"]}
    services = [service("alpha", 30.0, **h100_only), service("beta", 12.0, **h100_only)]
    path = write_fleet(tmp_path, services=services, inventory={"h100-sxm": {"reserved": 1, "reserved_usd_per_hour": 2.093}})
    fp = make_fleet_plan(load_fleet(path), explore=False)
    [(h100, price, each)] = reservation_savings(fp)
    assert (h100.gpu, price, h100.committed) == ("h100-sxm", 2.093, 1) and h100.on_demand > 1
    assert each == h100.on_demand_usd_per_gpu_hour - price
    assert (f"**Reservations worth adding**: h100-sxm runs {h100.on_demand} GPUs on demand at "
            f"{usd_rate_text(h100.on_demand_usd_per_gpu_hour)}/GPU-hour beside its 1 committed; each reserved at the "
            f"inventory's reserved price ($2.093/GPU-hour) would save {usd_rate_text(each)} an hour, "
            f"{usd_text(each * h100.on_demand)} an hour for all {h100.on_demand} "
            f"({usd_text(each * h100.on_demand * HOURS_PER_MONTH)} a month).") in render_fleet(fp)
    [typed] = [t for t in fleet_json(fp)["gpu_types"] if t["gpu"] == "h100-sxm"]
    assert typed["on_demand_reserved_saves_usd_per_hour"] == pytest.approx(each * h100.on_demand)
    more = write_fleet(tmp_path, services=services,
                       inventory={"h100-sxm": {"reserved": 1 + h100.on_demand, "reserved_usd_per_hour": 2.093}})
    replanned = make_fleet_plan(load_fleet(more), explore=False)
    assert replanned.cost_per_hour <= fp.cost_per_hour - each * h100.on_demand + 1e-6
    assert not reservation_savings(replanned)  # nothing left on demand
    # none where the reservation costs more than on demand, or the type's commitments are owned (their
    # price may be sunk: $0 is no offer of more), or nothing is committed
    for inventory in ({"h100-sxm": {"reserved": 1, "reserved_usd_per_hour": 3.5}},
                      {"h100-sxm": {"owned": 1, "owned_usd_per_hour": 0}}, {}):
        other = make_fleet_plan(load_fleet(write_fleet(tmp_path, services=services, inventory=inventory)), explore=False)
        assert any(t.on_demand for t in other.types) and not reservation_savings(other)
        assert "Reservations worth adding" not in render_fleet(other)
        assert all(t["on_demand_reserved_saves_usd_per_hour"] is None for t in fleet_json(other)["gpu_types"])


def test_a_services_rows_compare_with_its_plan_alone_and_say_so(tmp_path):
    """Owned L40S go to the services (sunk), though alone at on-demand prices each would buy H100s.
    A section's re-solves are of the service alone (on-demand prices, the caps the others leave), so
    every row of it compares with the plan it makes alone, whose x1 rows are that plan (not a fleet it
    does not run beside a 'vs plan' of the fleet's choice), and the section says how the two differ."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import service_section

    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, inventory={"l40s": {"owned": 40, "owned_usd_per_hour": 0.5}})))
    assert all(p.pools and {pool.config.gpu.id for pool in p.pools} == {"l40s"} for p in fp.plans)
    for i, plan in enumerate(fp.plans):
        alone = plan.alone.solution
        assert "h100-sxm" in {p.gpu for p in alone.pools}  # alone, H100s are cheaper than bought L40S
        base = plan.compared_usd_per_hour
        assert base == alone.cost_per_hour < plan.cost_per_hour
        x1 = next(o for o in plan.sensitivity if o.name == "peak x 1")
        chosen = next(o for o in plan.split_analysis if o.solution.option == alone.option)
        assert x1.solution is alone and chosen.solution is alone
        for m, o in plan.ttft_sweep:
            assert (o.cost_per_hour >= base - 1e-9) if m < 1 else (o.cost_per_hour <= base + 1e-9)
        text = service_section(fp, i)
        assert f"So solved, its plan is {plan.alone.summary}" in text
        assert "The fleet runs the plan above instead" in text
        assert f"| as stated | ${base:,.2f} | same | {alone.gpus} | {plan.alone.summary} |" in text
        assert f"| as planned, alone | {plan.peak_rps:,.2f} | ${base:,.2f} |" in text  # not the fleet's plan


def test_solve_fleet_json_has_services_and_a_budget_overrun_exits_3(tmp_path):
    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 1000}})
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [s["scenario"] for s in doc["services"]] == ["alpha", "beta"]
    for s in doc["services"]:
        for key in ("plan", "cost_usd_per_hour", "cost_usd_per_million_tokens", "split_threshold", "solver_status", "candidates"):
            assert key in s
    assert doc["cost_usd_per_hour"] == pytest.approx(sum(s["cost_usd_per_hour"] for s in doc["services"]))
    # nothing committed, so nothing idle; two dense services, so no MoE exposure
    assert doc["gpus_paid_for"] == doc["gpus"] == sum(doc["gpus_by_type"].values())
    assert doc["moe_exposure"] is None
    report = (tmp_path / "out" / "twin.md").read_text(encoding="utf-8")
    assert report.startswith("# Fleet plan: twin")
    assert "| Peak req/s served | Rejected (over its context limit) |" in report
    for s in doc["services"]:  # every request of either service fits its limit
        assert re.search(rf"\| {s['scenario']} \| `[^`]+` \| [\d.,]+ \| none \|", report)
    assert (tmp_path / "out" / "twin_alpha_traffic.png").is_file()

    poor = write_fleet(tmp_path, budget_usd_per_month=100.0)
    r = CliRunner().invoke(main, ["solve", str(poor), "--out-dir", str(tmp_path / "poor")])
    assert r.exit_code == 3
    assert "budget_usd_per_month: the cheapest fleet costs $" in r.output and "over the budget of $100.00" in r.output
    assert not (tmp_path / "poor").exists()


def test_a_service_stopped_by_its_own_cap_is_told_the_cap_is_its_own(tmp_path):
    """Its gpus' max_gpus and the fleet's inventory both read "the inventory caps": which to raise?"""
    capped = service("alpha", 30.0, gpus=[{"id": "h100-sxm", "max_gpus": 1}])
    path = write_fleet(tmp_path, services=[capped], inventory={"h100-sxm": {"max_new": 20}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-verify", "--no-report"])
    assert r.exit_code == 3
    assert r.output.strip().endswith("; of those caps, h100-sxm ≤ 1 GPU (the fleet's inventory allows 20 GPUs) is the "
                                     "service's own (its gpus' max_gpus)"), r.output
    fleet_capped = write_fleet(tmp_path, services=[service("alpha", 30.0, gpus=["h100-sxm"])],
                               inventory={"h100-sxm": {"max_new": 1}})
    r = CliRunner().invoke(main, ["solve", str(fleet_capped), "--no-verify", "--no-report"])
    assert r.exit_code == 3 and "inventory caps (h100-sxm ≤ 1 GPU)" in r.output and "service's own" not in r.output


def test_a_fleet_over_the_bound_on_gpus_is_refused_though_each_service_is_within_it(tmp_path):
    """Two services of some 65 million GPUs each: each within the bound ilp checks a service against,
    the fleet not. `solve` reported a fleet of 130 million GPUs, and `forecast` carried them forward
    into a next quarter's inventory past its own bound, ending in a validation traceback."""
    services = [service(name, 1e7) for name in ("a", "b")]
    for svc in services:
        svc["traffic"]["growth"] = 80
    path = write_fleet(tmp_path, services=services, forecast={"carry_forward": True,
                                                              "quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2"}]})
    for command in (["solve", "--no-verify"], ["forecast"]):
        out = tmp_path / command[0]
        r = CliRunner().invoke(main, [*command, str(path), "--out-dir", str(out)])
        assert r.exit_code == 3, r.output
        m = re.fullmatch(r"error: \S+: (forecast quarter 2027Q1: )?the fleet needs ([\d,]+) GPUs \(a ([\d,]+), b ([\d,]+)\), "
                         r"more than the 100,000,000 that bound any fleet .*; check its services' traffic\.peak, "
                         r"traffic\.growth and traffic\.headroom( \(in a forecast, the quarters' growth too: "
                         r"forecast\.quarters\[\]\.growth\))?\n", r.output)
        assert m is not None, r.output
        assert (m.group(1) is None) == (m.group(5) is None) == (command[0] == "solve")  # a forecast names its growth
        total, a, b = (int(g.replace(",", "")) for g in m.groups()[1:4])
        assert total == a + b > 100_000_000 and max(a, b) <= 100_000_000
        assert not out.exists()


def near_the_bound(name: str, *, growth: float) -> dict:
    """A certified chat service of ten million requests/s times `growth`: at 123, 48 million H100s
    by the model; at 246, 96.9 million, and past the bound on a fleet's GPUs once replays measure."""
    return {"name": name, "model": "llama-3.1-8b", "context_limit": 16384,
            "traffic": {"source": {"synthetic": {"name": "chat", "requests": 100000, "seed": 3, "rate_rps": 500}},
                        "peak": {"method": "explicit", "rps": 1e7}, "growth": growth},
            "slo": {"statistic": "p99", "bands": [{"ttft_s": 2.0, "tpot_ms": 50}]},
            "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["fp8"], "kv_dtypes": ["fp8"], "split_thresholds": [],
            "verify": True}


def test_a_fleet_that_certification_takes_past_the_bound_is_refused_and_idle_commitments_count(tmp_path):
    """The bound was checked on the model's plan only: certification re-plans at the capacities it
    measured, and two certified services of 48 million GPUs each by the model came to 102.6 million
    (exit 0; `forecast` then carried them past an inventory's bound into a traceback). Committed GPUs
    left idle are held too: 90 million reserved H100s beside 94 million L40S in use passed."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan

    path = write_fleet(tmp_path, services=[near_the_bound(name, growth=123) for name in ("a", "b")])
    by_the_model = make_fleet_plan(load_fleet(path), explore=False, certify=False)
    assert by_the_model.gpus <= 100_000_000  # within the bound until certification measures
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 3 and re.search(r"the fleet needs ([\d,]+) GPUs \(a [\d,]+, b [\d,]+\), more than the "
                                          r"100,000,000", r.output), r.output
    assert not (tmp_path / "out").exists()

    idle = write_fleet(tmp_path, services=[service("a", 10.0, gpus=["h100-sxm"]),
                                           dict(service("b", 1e7, gpus=["l40s"]), traffic={
                                               **service("b", 1e7)["traffic"], "growth": 20})],
                       inventory={"h100-sxm": {"reserved": 90_000_000, "reserved_usd_per_hour": 2.0}})
    r = CliRunner().invoke(main, ["solve", str(idle), "--no-verify", "--no-report"])
    assert r.exit_code == 3, r.output
    assert re.search(r"the fleet holds ([\d,]+) GPUs \(([\d,]+) in use and 89,999,999 committed and idle\), more than "
                     r"the 100,000,000 that bound any fleet", r.output), r.output


def test_a_fleet_forecast_quarter_holding_reservations_past_the_bound_names_where_they_come_from(tmp_path):
    # "check the owned and reserved GPUs it states", of a fleet that states none: its quarters reserved them
    quarters = [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "reserved": {"h100-sxm": 90_000_000, "l40s": 90_000_000}}]
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)], forecast={"quarters": quarters})
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 3, r.output
    assert re.search(r"forecast quarter 2027Q2: the fleet holds 180,000,000 GPUs \([\d,]+ in use and [\d,]+ committed "
                     r"and idle\), more than the 100,000,000 .*; check the inventory's owned and reserved GPUs \(in a "
                     r"forecast, with what its quarters reserve: forecast\.quarters\[\]\.reserved", r.output), r.output
    assert not (tmp_path / "out").exists()


def test_a_service_that_certification_takes_past_the_bound_is_named(tmp_path):
    """One service within the bound by the model (96.9 million GPUs), past it at the capacities its
    replays measure: refused for the bound, naming the service (a fleet's services share class names),
    where it read "no plan holds its targets in simulation"."""
    path = write_fleet(tmp_path, services=[near_the_bound("b", growth=0.0001), near_the_bound("a", growth=246)])
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 3 and re.search(r"fleet\.yaml: at the capacities simulation measured, service 'a': class "
                                          r"'all' needs ([\d,]+) GPUs .* more than the 100,000,000", r.output), r.output
    assert not (tmp_path / "out").exists()


def test_a_budget_short_by_less_than_a_cent_is_told_so_as_stated(tmp_path):
    """Both to the cent, a budget of $10,913.499 against a $10,913.50 fleet read "$0.00 over the budget
    of $10,913.50"."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan

    cost = make_fleet_plan(load_fleet(write_fleet(tmp_path)), explore=False, certify=False).cost_per_month
    budget = math.floor(cost * 1000 - 1) / 1000
    r = CliRunner().invoke(main, ["solve", str(write_fleet(tmp_path, budget_usd_per_month=budget)), "--no-verify",
                                  "--no-report"])
    assert r.exit_code == 3
    assert r.output.strip().endswith(f"less than a cent over the budget of ${budget:,}"), r.output


def test_a_budget_is_in_the_json_and_called_the_fleet_s_one_rule(tmp_path):
    """The report stated a budget and what the plan leaves of it, `--json` neither; and with no cap the
    report said no fleet-wide rule was set, with a budget set."""
    path = write_fleet(tmp_path, budget_usd_per_month=100_000.0)
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["budget_usd_per_month"] == 100_000.0
    assert doc["budget_left_usd_per_month"] == pytest.approx(100_000.0 - doc["cost_usd_per_month"])
    report = (tmp_path / "out" / "twin.md").read_text(encoding="utf-8")
    assert ("No shared limit: no shared GPU type has a cap and the fleet-wide budget, its one rule, refuses a fleet "
            "over it and never changes the cheapest one, so every service's plan is the one it would make alone.") in report
    plain = json.loads(CliRunner().invoke(main, ["solve", str(write_fleet(tmp_path)), "--no-report", "--json"]).output)
    assert (plain["budget_usd_per_month"], plain["budget_left_usd_per_month"]) == (None, None)


def test_committed_gpus_of_a_type_no_service_can_run_are_named_as_such(tmp_path):
    """Four reserved H200s, no service listing h200: paid and idle, 74% of a probe's fleet cost, as if
    the optimiser had left them so; a forgotten `gpus:` entry is said."""
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)],
                       inventory={"h200": {"reserved": 4, "reserved_usd_per_hour": 4.0}})
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "twin.md").read_text(encoding="utf-8")
    assert ("h200: 4 committed GPUs no service can run (none lists h200 among its `gpus`): idle, $16.00 per hour. "
            "List it in a service's `gpus` to plan on them.") in report
    runs = write_fleet(tmp_path, services=[service("alpha", 3.0)],
                       inventory={"l40s": {"owned": 8, "owned_usd_per_hour": 0.7}})
    assert CliRunner().invoke(main, ["solve", str(runs), "--out-dir", str(tmp_path / "runs")]).exit_code == 0
    assert "no service can run" not in (tmp_path / "runs" / "twin.md").read_text(encoding="utf-8")


def test_the_command_line_names_committed_gpus_left_idle_whose_cost_it_counts(tmp_path):
    """Eight owned L40S, one small service: the line's $/hour pays all eight, so it names the idle
    ones, as the report and `planner forecast` do; a fleet that uses what it committed says nothing."""
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)],
                       inventory={"l40s": {"owned": 8, "owned_usd_per_hour": 0.7}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    used = int(re.fullmatch(r"twin: \$5\.60/hour, (\d) GPUs? \(\1 l40s\), 1 service; committed idle: (\d) l40s, "
                            r"\$[\d.]+/hour of the cost",
                            first).group(1))
    from planner.units import usd_text

    assert first.endswith(f"committed idle: {8 - used} l40s, {usd_text((8 - used) * 0.7)}/hour of the cost")
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)],
                       inventory={"l40s": {"owned": used, "owned_usd_per_hour": 0.7}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 0 and "idle" not in r.output, r.output


def test_the_fleet_totals_say_when_the_sections_own_prices_sum_below_the_fleet_s_cost(tmp_path):
    """Twenty owned H100s at $2/hour for one small service: its section quotes its own on-demand
    price, far less than the fleet pays for all twenty, and the totals say so and why."""
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)],
                       inventory={"h100-sxm": {"owned": 20, "owned_usd_per_hour": 2.0}})
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "out" / "twin.md").read_text(encoding="utf-8")
    m = re.search(r"summed, \$([\d,.]+) per hour \(\$[\d,.]+ per month\), \$([\d,.]+) per hour less than the fleet "
                  r"pays \(\$40\.00, at its commitments' prices and with its idle commitments\)\. For a budget, take the "
                  r"fleet's cost\.", text)
    assert m is not None, text[:3000]
    assert float(m.group(1)) + float(m.group(2)) == pytest.approx(40.0, abs=0.011)


def test_a_fleet_with_no_plan_names_the_service_that_cannot_be_served_or_what_each_takes_alone(tmp_path):
    """A service that no plan serves even with every shared cap to itself is named, with its class
    and what the caps allow; where each fits alone but not together, the message says so and what
    each one's cheapest plan alone takes (formerly: "every service can be served alone", also when
    the caps left one of them nothing)."""
    one_h100 = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 1}, "l40s": {"max_new": 0}})
    r = CliRunner().invoke(main, ["solve", str(one_h100), "--out-dir", str(tmp_path / "a")])
    assert r.exit_code == 3
    assert re.fullmatch(r"error: .*fleet\.yaml: service 'alpha': class 'all \(≤ 8,192 tokens\)' needs 36 req/s but the "
                        r"inventory caps \(h100-sxm ≤ 1 GPU, l40s ≤ 0 GPUs\) allow at most [\d.]+ req/s\n", r.output)

    apart = write_fleet(tmp_path, max_gpu_types=1, services=[service("alpha", 30.0, gpus=["h100-sxm"]),
                                                             service("beta", 12.0, gpus=["l40s"])])
    r = CliRunner().invoke(main, ["solve", str(apart), "--out-dir", str(tmp_path / "b")])
    assert r.exit_code == 3
    assert re.fullmatch(r"error: .*fleet\.yaml: every service can be served alone within the shared caps, but the shared "
                        r"rules \(at most 1 GPU type\) leave no fleet that covers every service's peak; alone \(each within "
                        r"the caps, the rules aside\), the cheapest plans take alpha \d+ h100-sxm; beta \d+ l40s\n", r.output)
    # Each fits alone only with a pool on each committed type (the fleet's rule, which its ILP has too):
    # without that rule the message blamed alpha, which the same inventory serves on its own.
    svc = {"traffic": {"source": {"constant": {"prompt_tokens": 2000, "output_tokens": 300}},
                       "peak": {"method": "explicit", "rps": 30.0}},
           "slo": {"statistic": "p99", "bands": [{"ttft_s": 1.0, "tpot_ms": 50}]}, "kv_dtypes": ["bf16"]}
    committed = {"h100-sxm": {"reserved": 4, "reserved_usd_per_hour": 2.0, "max_new": 0},
                 "l40s": {"owned": 2, "owned_usd_per_hour": 0.7, "max_new": 0}}
    alone = write_fleet(tmp_path, services=[service("alpha", 30.0, **svc)], inventory=committed)
    r = CliRunner().invoke(main, ["solve", str(alone), "--no-verify", "--no-report", "--out-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    both = write_fleet(tmp_path, services=[service("alpha", 30.0, **svc),
                                           service("beta", 30.0, **{**svc, "model": "llama-3.2-3b"})],
                       inventory=committed)
    r = CliRunner().invoke(main, ["solve", str(both), "--out-dir", str(tmp_path / "d")])
    assert r.exit_code == 3
    assert re.fullmatch(r"error: .*fleet\.yaml: every service can be served alone within the shared caps, but the shared "
                        r"rules \(h100-sxm ≤ 4 GPUs, l40s ≤ 2 GPUs\) leave no fleet that covers every service's peak; "
                        r"alone \(each within the caps, the rules aside\), the cheapest plans take alpha 4 h100-sxm \+ 2 "
                        r"l40s; beta \d+ h100-sxm( \+ \d+ l40s)?\n", r.output)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "d").exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"inventory": {"h100": {"max_new": 4}}}, "fleet.yaml: inventory.h100: unknown GPU 'h100'; did you mean 'h100-sxm'?"),
    ({"inventory": {"l40s": {"owned": 4}}}, "inventory.l40s: owned: 4 GPUs need owned_usd_per_hour"),
    # each count is within the bound, their sum is not
    ({"inventory": {"l40s": {"owned": 60_000_000, "owned_usd_per_hour": 1, "reserved": 60_000_000,
                             "reserved_usd_per_hour": 1}}},
     "inventory.l40s: owned + reserved + max_new = 120,000,000 GPUs, more than a fleet may hold "
     "(100,000,000)"),
    # ... and across the types too
    ({"inventory": {"h100-sxm": {"reserved": 60_000_000, "reserved_usd_per_hour": 1},
                    "l40s": {"owned": 60_000_000, "owned_usd_per_hour": 1}}},
     "inventory: owned + reserved + max_new over every type = 120,000,000 GPUs, more than a fleet may "
     "hold (100,000,000)"),
    # a price of no GPUs would price nothing (every GPU of the type ran on demand at its on-demand price)
    ({"inventory": {"h100-sxm": {"reserved_usd_per_hour": 2.0, "max_new": 8}}},
     "inventory.h100-sxm: reserved_usd_per_hour: a price for no reserved GPUs would price nothing; state "
     "reserved: N, the GPUs it prices; the price of commitments a forecast makes is forecast.reserved_prices"),
    ({"inventory": {"l40s": {"owned_usd_per_hour": 0.7}}},
     "inventory.l40s: owned_usd_per_hour: a price for no owned GPUs would price nothing; state owned: N, "
     "the GPUs it prices"),
    ({"services": [service("alpha", 3.0), service("alpha", 4.0)]}, "services[1]: a second service named 'alpha'"),
    ({"services": [service("alpha", 3.0), service("Alpha", 4.0)]}, "services[1]: a second service named 'Alpha' "
                                                                  "(service names name report sections and figure "
                                                                  "files, compared without case)"),
    ({"services": [service("alpha", 3.0, gpus=[{"id": "h100-sxm", "price_usd_per_hour": 2.5}])],
      "inventory": {"h100-sxm": {"price_usd_per_hour": 2.2}}},
     "services[0]: gpus[0]: price of the shared GPU type 'h100-sxm' is 2.5 $/hour here but 2.2 in the fleet"),
    ({"services": ["missing.yaml"]}, "services[0]: no scenario file missing.yaml"),
    # a name longer than a file system allows: no file either (Python 3.11's is_file raised for it)
    ({"services": ["x" * 300 + ".yaml"]}, f"services[0]: no scenario file {'x' * 60}... (305 characters)"),
    ({"services": ["  "]}, "services[0]: a blank path, where a scenario file is expected"),
    ({"services": ["."]}, "fleet.yaml: services[0]: . is a folder; a service is one scenario file"),
    # there, but a device: it read "no scenario file /dev/null"
    ({"services": [os.devnull]}, f"services[0]: {os.devnull} is not a regular file; a service is one scenario file"),
    ({"services": ["a\x00b.yaml"]}, "services[0]: no scenario file 'a\\x00b.yaml' (paths"),
    ({"services": [service("alpha", 3.0, forecast={"quarters": [{"quarter": "2027Q1"}]})]},
     "services[0]: forecast: a service of a fleet has no forecast of its own (it would be ignored)"),
    # the fleet's solver solves every service: another one stated for a service would be ignored
    ({"services": [service("alpha", 3.0, solver={"backend": "cbc", "time_limit_s": 1})]},
     "services[0]: solver: a fleet's services are solved by the fleet's solver (highs, time limit 60 s), so this "
     "service's (cbc, time limit 1 s) would be ignored; state it in the fleet file"),
    # only what the service states counts, not its defaults
    ({"services": [service("alpha", 3.0, solver={"time_limit_s": 5})], "solver": {"backend": "cbc"}},
     "services[0]: solver: a fleet's services are solved by the fleet's solver (cbc, time limit 60 s), so this "
     "service's (time limit 5 s) would be ignored"),
    # certification replays the whole fleet: every service or none
    ({"services": [service("alpha", 3.0, verify=True), service("beta", 3.0)]},
     "services[1]: verify: false here and true for 'alpha': a fleet's services are certified together (a pool that "
     "misses re-solves the whole fleet), so they state verify alike (or --verify or --no-verify settles it for all)"),
    ({"services": [service("alpha", 3.0, catalog={"gpus": {"h100-sxm": {"memory_gib": 20}}}), service("beta", 3.0)]},
     "services[1]: GPU type 'h100-sxm' is defined differently here and in service 'alpha' (memory_gib); one type is "
     "one piece of hardware across the fleet"),
    ({"services": [service("alpha", 3.0, gpus=[{"id": "h100-sxm", "price_usd_per_hour": 1.5}]), service("beta", 3.0)]},
     "services[1]: GPU type 'h100-sxm' costs 2.99 $/hour here but 1.5 in service 'alpha'; a type the services share "
     "has one on-demand price: set it in the fleet's inventory"),
    # an inventory type without a price of its own has the catalog's, whichever service comes first
    ({"services": [service("alpha", 3.0, gpus=[{"id": "h100-sxm", "price_usd_per_hour": 1.5}]), service("beta", 3.0)],
      "inventory": {"h100-sxm": {"max_new": 10}}},
     "services[0]: gpus[0]: price of the shared GPU type 'h100-sxm' is 1.5 $/hour here but 2.99 in the fleet"),
    ({"services": [service("beta", 3.0), service("alpha", 3.0, gpus=[{"id": "h100-sxm", "price_usd_per_hour": 1.5}])],
      "inventory": {"h100-sxm": {"max_new": 10}}},
     "services[1]: gpus[0]: price of the shared GPU type 'h100-sxm' is 1.5 $/hour here but 2.99 in the fleet"),
    # stated in the service's catalog, named there (it read "gpus[0]", which states no price: an outside probe)
    ({"services": [service("beta", 3.0), service("alpha", 3.0, catalog={"gpus": {"h100-sxm": {"price_usd_per_hour": 1.5}}})],
      "inventory": {"h100-sxm": {"max_new": 10}}},
     "services[1]: catalog: gpus.h100-sxm.price_usd_per_hour: price of the shared GPU type 'h100-sxm' is 1.5 $/hour "
     "here but 2.99 in the fleet"),
    ({"inventory": {"h200": {"max_new": 8}}},
     "fleet.yaml: inventory.h200: no service may run h200 and none is owned or reserved, so this would change "
     "nothing; add it to a service's gpus or drop it"),
    ({"inventory": {None: {"owned": 2, "owned_usd_per_hour": 0.7}}},
     "invalid YAML: a null key (~, null, or nothing before the colon): give the key's name"),
    ({"services": [{**service("alpha", 3.0), "modle": "x"}]}, "services[0].modle: unknown key; did you mean 'model'?"),
    ({"services": ["fleet.yaml"]}, "fleet.yaml: services[0]: fleet.yaml is this fleet file itself; a service is one "
                                   "scenario file"),
    # `solve` runs no quarters, yet refuses the forecast section `forecast` would refuse
    ({"forecast": {"quarters": [{"quarter": "2027Q1", "prices": {"zz9000": 3.0}}]}},
     "fleet.yaml: forecast.quarters[0].prices: unknown GPU 'zz9000'"),
    # commitments no service can use: paid for and idle from the start, as a scenario's quarter refuses them
    ({"forecast": {"quarters": [{"quarter": "2027Q1", "reserved": {"h200": 4}}]}},
     "fleet.yaml: forecast.quarters[0].reserved.h200: no service may run h200, so these GPUs would be paid for and "
     "stand idle; add it to a service's gpus or drop it"),
    # a fleet's committed types always may hold a pool of their own: the setting would be ignored
    ({"forecast": {"reserved_pools": False, "quarters": [{"quarter": "2027Q1"}]}},
     "fleet.yaml: forecast.reserved_pools: false would be ignored: in a fleet a class may always keep a pool of its "
     "own on a committed type"),
    # committed GPUs of a type no service runs stand idle: a price or cap for them would change nothing
    ({"inventory": {"h200": {"reserved": 2, "reserved_usd_per_hour": 4.4}},
      "forecast": {"quarters": [{"quarter": "2027Q1", "prices": {"h200": 3.0}}]}},
     "fleet.yaml: forecast.quarters[0].prices.h200: no service may run h200 (the inventory's stand idle), so this "
     "would change nothing; add it to a service's gpus or drop it"),
    ({"inventory": {"h200": {"reserved": 2, "reserved_usd_per_hour": 4.4}},
      "forecast": {"quarters": [{"quarter": "2027Q1", "availability": {"h200": 8}}]}},
     "fleet.yaml: forecast.quarters[0].availability.h200: no service may run h200 (the inventory's stand idle)"),
    ({"inventory": {"h200": {"reserved": 2, "reserved_usd_per_hour": 4.4}},
      "forecast": {"reserved_prices": {"h200": 4.0}, "quarters": [{"quarter": "2027Q1"}]}},
     "fleet.yaml: forecast.reserved_prices.h200: no service may run h200, so the forecast commits none and this "
     "would change nothing"),
    ({"forecast": {"quarters": [{"quarter": "2027Q1", "reserved": {"h2000": 4}}]}},
     "fleet.yaml: forecast.quarters[0].reserved: unknown GPU 'h2000'; did you mean 'h200'?"),
    ({"forecast": {"quarters": [{"quarter": "2027Q1", "context_limit": 4096}]}},
     "fleet.yaml: forecast.quarters[0].context_limit: a fleet's quarters change demand"),
    ({"forecast": {"reserved_prices": {"b200": 1.0}, "quarters": [{"quarter": "2027Q1"}]}},
     "fleet.yaml: forecast.reserved_prices: GPU 'b200' is not among the services' gpus and the inventory; they are: "
     "h100-sxm, l40s (a committed price needs the GPU among them)"),
    ({"services": [service("x-y", 3.0), service("x_y", 3.0)]},
     "fleet.yaml: services[1]: 'x_y' and 'x-y' differ only in '-', '_' or '.', which the ILP's names (and its .lp "
     "file) cannot tell apart: rename one"),
    ({"services": [service("a-b", 3.0), service("a_b", 3.0)]},
     "fleet.yaml: services[1]: 'a_b' and 'a-b' differ only in '-', '_' or '.'"),
    ({"budget_usd_per_month": 0.0001}, "budget_usd_per_month: Input should be greater than or equal to 1"),
])
def test_a_wrong_fleet_file_gets_one_line_naming_the_place(tmp_path, change, message):
    path = write_fleet(tmp_path, **change)
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_service_path_linked_to_a_device_is_not_called_a_link_to_nothing(tmp_path):
    # the link check came first: "devnull.yaml is a symbolic link that leads nowhere", its target being there
    (tmp_path / "devnull.yaml").symlink_to(os.devnull)
    path = write_fleet(tmp_path, services=["devnull.yaml"])
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 2 and r.output.strip().endswith(
        "services[0]: devnull.yaml is not a regular file; a service is one scenario file"), r.output


def test_a_service_solver_or_verify_the_fleet_settles_anyway_is_accepted(tmp_path):
    """A scenario file shared between standalone and fleet use: its `solver: {backend: highs}` states
    nothing the fleet's solver (with another time limit) contradicts; services that disagree on
    `verify` are refused only where no flag settles it for all."""
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, solver={"backend": "highs"}), service("beta", 3.0)],
                       solver={"backend": "highs", "time_limit_s": 120})
    assert CliRunner().invoke(main, ["solve", str(path), "--no-report"]).exit_code == 0
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, verify=True), service("beta", 3.0)])
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report", "--no-verify", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["certified"] is None
    assert CliRunner().invoke(main, ["solve", str(path), "--no-report"]).exit_code == 2
    # `planner forecast` takes the flags too, and its refusal names them
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, verify=True), service("beta", 3.0)],
                       forecast={"quarters": [{"quarter": "2027Q1"}]})
    r = CliRunner().invoke(main, ["forecast", str(path), "--no-report"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().endswith("so they state verify alike (or --verify or --no-verify settles it for all)")
    r = CliRunner().invoke(main, ["forecast", str(path), "--no-report", "--no-verify", "--json"])
    assert r.exit_code == 0, r.output
    [quarter] = json.loads(r.output)["quarters"]
    assert quarter["quarter"] == "2027Q1"


def test_the_keys_only_a_fleet_file_has_are_the_fleet_schema_s_beyond_a_scenario_s():
    from planner.fleet import FleetSpec
    from planner.scenario import FLEET_ONLY_KEYS, Scenario
    assert set(FLEET_ONLY_KEYS) == set(FleetSpec.model_fields) - set(Scenario.model_fields)


@pytest.mark.parametrize("command", ["solve", "forecast", "simulate"])
@pytest.mark.parametrize(("key", "message"), [
    ("service", "service: unknown key; did you mean 'services'? (a fleet file lists its services under services:, a "
                "scenario states model: and traffic:)"),
    ("inventory", "services: required field is missing (inventory: is a fleet file's key; a fleet file lists its "
                  "services under services:)"),
])
def test_a_fleet_file_without_its_services_key_is_told_so_not_that_a_scenario_lacks_its_model(tmp_path, command, key,
                                                                                               message):
    path = tmp_path / "fleet.yaml"
    value = [service("alpha", 3.0)] if key == "service" else {"h100-sxm": {"max_new": 4}}
    path.write_text(yaml.safe_dump({"name": "twin", key: value}), encoding="utf-8")
    out = ["--out-dir", str(tmp_path / "out")] if command != "simulate" else []
    r = CliRunner().invoke(main, [command, str(path), *out])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"error: {path}: {message}"


def test_a_type_with_only_idle_commitments_has_no_paid_price_in_the_csv():
    """(An outside probe: 4 reserved L40S, all idle, read $0.000000 a GPU-hour in the types CSV where the
    Markdown shows "—": loaded into a spreadsheet, paid GPUs read as free.)"""
    from types import SimpleNamespace

    from planner.fleet_forecast import TYPE_COLUMNS
    from planner.fleet_plan import TypeUse
    from planner.forecast_outputs import _table

    idle = TypeUse("l40s", committed=4, used=0, on_demand=0, idle_committed=4, cap=None,
                   on_demand_usd_per_gpu_hour=1.4, committed_usd_per_hour=2.8)
    assert idle.paid_usd_per_gpu_hour is None
    header, row = _table(TYPE_COLUMNS, [(SimpleNamespace(quarter="2027Q1"), idle)])
    assert dict(zip(header, row, strict=True))["paid_usd_per_gpu_hour"] == ""
    assert dict(zip(header, row, strict=True))["usd_per_hour"] == "2.800000"


def test_a_fleet_forecast_states_the_budget_it_holds_every_quarter_to(tmp_path):
    """The budget is enforced on every quarter (one over it exits 3), and the forecast said nothing of it."""
    from planner import fleet_forecast as ff
    from planner.fleet import load_fleet
    from planner.units import usd_text

    forecast = {"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.5}]}
    path = write_fleet(tmp_path, forecast=forecast, budget_usd_per_month=50_000.0)
    fleet = load_fleet(path)
    q1, q2 = results = ff.run_fleet_forecast(fleet)
    assert q2.plan.cost_per_month > q1.plan.cost_per_month

    assert (f"Budget: $50,000.00 per month (`budget_usd_per_month`), every quarter's fleet within it; the closest, "
            f"2027Q2, leaves {usd_text(50_000.0 - q2.plan.cost_per_month)} of it a month.") in ff.fleet_forecast_markdown(
                "twin", results, fleet)
    assert ff.fleet_forecast_json(results)["budget_usd_per_month"] == 50_000.0


def test_fleet_forecast_carries_the_whole_fleet_forward(tmp_path):
    """With carry_forward, a quarter commits what the whole fleet ran the quarter before; every
    quarter's type rows add up to its cost."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_tables, run_fleet_forecast

    forecast = {"carry_forward": True, "reserved_discount": 0.25,
                "quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.5}]}
    path = write_fleet(tmp_path, forecast=forecast)
    q1, q2 = run_fleet_forecast(load_fleet(path))
    assert q2.demand_multiplier == 1.5
    for t in q2.plan.types:
        assert t.committed == q1.plan.joint.gpus_by_type.get(t.gpu, 0)
        assert t.committed_usd_per_hour == pytest.approx(t.committed * t.on_demand_usd_per_gpu_hour * 0.75)
    for q in (q1, q2):
        assert sum(t.usd_per_hour for t in q.plan.types) == pytest.approx(q.cost_per_hour)
    tables = fleet_forecast_tables([q1, q2])
    assert tables["services"].splitlines()[0].startswith("quarter,service,model,")
    assert len(tables["services"].splitlines()) == 1 + 2 * 2

    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    for suffix in ("forecast.md", "forecast_quarters.csv", "forecast_services.csv", "forecast_types.csv",
                   "forecast_total.csv", "forecast_datapackage.json"):
        assert (tmp_path / "out" / f"twin_{suffix}").is_file()
    # The total row: the quarters' cost as written, summed, and the commitments the forecast leaves
    # after its end, which the Markdown's headline names and the CSV tables had left out.
    import csv

    from frictionless import Package

    from planner.commitments import committed_after_end_usd

    def table(name):
        return list(csv.DictReader((tmp_path / "out" / f"twin_forecast_{name}.csv").read_text(encoding="utf-8").splitlines()))

    [total] = table("total")
    assert (total["first_quarter"], total["last_quarter"], total["quarters"], total["hours"]) == ("2027Q1", "2027Q2", "2", "4380")
    assert float(total["total_usd"]) == pytest.approx(sum(float(q["total_usd"]) for q in table("quarters")), abs=1e-6)
    # no commitment term stated: nothing is known after the end (the shipped forecast states one)
    assert committed_after_end_usd(q2.lots, 1, None) is None and total["committed_after_end_usd"] == ""
    report = Package(str(tmp_path / "out" / "twin_forecast_datapackage.json")).validate()
    assert report.valid, report.flatten(["rowNumber", "fieldName", "type", "note"])
    # The report prices every commitment it makes and names its terms; a service's cost as paid is
    # its GPUs at its types' average price in use.
    md = (tmp_path / "out" / "twin_forecast.md").read_text(encoding="utf-8")
    (lot,) = q2.commitments
    assert (lot.gpu, lot.gpus, lot.terms_quarter) == ("h100-sxm", q1.plan.joint.gpus_by_type["h100-sxm"], "2027Q1")
    assert lot.usd_per_gpu_hour == pytest.approx(2.99 * 0.75)
    assert f"| 2027Q2 | +{lot.gpus} h100-sxm | $2.2425 | on demand $2.99 × (1 − 0.25) | 2027Q1 |" in md
    (h100,) = [t for t in q2.plan.types if t.gpu == "h100-sxm"]
    for plan in q2.plan.plans:
        assert q2.plan.paid_usd_per_hour(plan) == pytest.approx(plan.solution.gpus * h100.paid_usd_per_gpu_hour)
    assert "| 2027Q2 | 1.5 |" in md
    # What the last quarter leaves committed runs past the forecast: the report prices it, and what
    # carry_forward would commit next at the last quarter's terms (on demand × 0.75).
    held = [t for t in q2.plan.types if t.committed]
    usd = sum(t.committed_usd_per_hour for t in held)
    after = usd + sum(t.on_demand * t.on_demand_usd_per_gpu_hour * 0.75 for t in q2.plan.types)
    assert ("Held at the end of 2027Q2: " + ", ".join(f"{t.committed} {t.gpu}" for t in held)
            + f", ${usd:,.2f}/hour (${usd * 2190:,.2f} a quarter)") in md
    assert any(t.on_demand for t in q2.plan.types)  # growth 0.5 outruns what Q1 committed
    assert ("would be committed from the next quarter at 2027Q2's terms" in md
            and f"${after - usd:,.2f}/hour more; ${after:,.2f}/hour committed in all." in md)


def test_the_shipped_fleet_forecast_s_services_and_types_add_up_to_its_quarters():
    """Each quarter's tokens are its services' whole tokens summed (each rounded on its own, the
    quarter's total rounded on its own was a token off them in every quarter), and its cost its
    types' cost."""
    import csv

    reports = Path(__file__).resolve().parent.parent / "reports"

    def rows(table):
        text = (reports / f"fleet_2027q1_forecast_{table}.csv").read_text(encoding="utf-8")
        return list(csv.DictReader(text.splitlines()))

    quarters, services, types = rows("quarters"), rows("services"), rows("types")
    assert len(quarters) == 4
    for q in quarters:
        mine = [s for s in services if s["quarter"] == q["quarter"]]
        assert len(mine) == int(q["services"])
        assert sum(int(s["tokens_per_hour_at_peak"]) for s in mine) == int(q["tokens_per_hour_at_peak"])
        assert sum(int(s["tokens"]) for s in mine) == int(q["tokens"])
        assert sum(float(t["usd_per_hour"]) for t in types if t["quarter"] == q["quarter"]) == pytest.approx(
            float(q["total_usd_per_hour"]))


def test_the_shipped_fleet_forecast_s_total_row_is_its_quarters_and_its_headline_s_commitments():
    """The year's cost and what its commitments cost after it were in the Markdown only: a finance
    reader loading the CSV tables got the year and nothing of the $0.7 million committed beyond it."""
    import csv

    reports = Path(__file__).resolve().parent.parent / "reports"
    quarters, [total] = (list(csv.DictReader((reports / f"fleet_2027q1_forecast_{t}.csv").read_text(encoding="utf-8")
                                             .splitlines())) for t in ("quarters", "total"))
    assert float(total["total_usd"]) == pytest.approx(sum(float(q["total_usd"]) for q in quarters), abs=1e-6)
    headline = (reports / "fleet_2027q1_forecast.md").read_text(encoding="utf-8").splitlines()[2]
    after = float(re.search(r"commit \$([\d,.]+) more after 2027Q4", headline).group(1).replace(",", ""))
    assert after > 0 and float(total["committed_after_end_usd"]) == pytest.approx(after, abs=0.005)
    # the year's price of a token at the day's volume: its cost over every quarter's tokens, as the headline says
    assert int(total["tokens"]) == sum(int(q["tokens"]) for q in quarters)
    per_million = float(total["total_usd"]) / int(total["tokens"]) * 1e6
    assert float(total["usd_per_million_tokens"]) == pytest.approx(per_million, abs=1e-8)
    assert f", ${per_million:.4f} per million tokens at the day's real volume" in headline


def test_a_fleet_forecast_prices_a_token_at_every_service_s_own_day(tmp_path):
    """The fleet forecast priced a token at every service's peak at once, a floor, and said it priced
    no day: a finance reader had no cost per token of the traffic the fleet really serves. Each service's
    day's mean rate is its busiest hour's × its profile's mean hour (2/3 for a cosine day of 3:1) ×
    growth; the fleet's tokens are its services' at those rates, and a service of unknown volume (no
    timestamps, no mean_rps) leaves the fleet without the figure, named."""
    import csv

    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_markdown, run_fleet_forecast

    forecast = {"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.5}]}
    alpha = service("alpha", 30.0)
    alpha["traffic"].update(mean_rps=24.0, profile={"shape": "diurnal", "peak_to_trough": 3, "peak_hour": 14})
    path = write_fleet(tmp_path, services=[alpha, service("beta", 12.0)], forecast=forecast)
    fleet = load_fleet(path)
    results = run_fleet_forecast(fleet)
    for r in results:
        a, b = r.plan.plans
        assert r.service_day(a).mean_rps == pytest.approx(24.0 * 2 / 3 * r.demand_multiplier, rel=1e-12)
        assert r.service_day(a).tokens == round(24.0 * 2 / 3 * r.demand_multiplier * 2190 * 3600 * 1700)
        assert r.service_day(b).tokens is None and r.day_tokens is None
    md = fleet_forecast_markdown("twin", results, fleet)
    assert "per million tokens at the day's real volume" not in md.splitlines()[2]
    assert "No day's volume (no timestamps and no traffic.mean_rps), so no fleet figure: beta." in md

    beta = service("beta", 12.0)
    beta["traffic"]["mean_rps"] = 9.0
    path = write_fleet(tmp_path, services=[alpha, beta], forecast=forecast)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output

    def table(name):
        return list(csv.DictReader((out / f"twin_forecast_{name}.csv").read_text(encoding="utf-8").splitlines()))

    quarters, services, [total] = table("quarters"), table("services"), table("total")
    for q, growth in zip(quarters, (1.0, 1.5), strict=True):
        mine = {s["service"]: s for s in services if s["quarter"] == q["quarter"]}
        means = {"alpha": 24.0 * 2 / 3 * growth, "beta": 9.0 * growth}  # beta's day is flat: its mean all day
        for name, mean in means.items():
            assert float(mine[name]["day_mean_rps"]) == pytest.approx(mean, rel=1e-9)
            assert int(mine[name]["tokens"]) == round(mean * 2190 * 3600 * 1700)
            paid = float(mine[name]["paid_usd_per_hour"]) * 2190
            assert float(mine[name]["paid_usd_per_million_tokens"]) == pytest.approx(
                paid / int(mine[name]["tokens"]) * 1e6, rel=1e-6)
        assert int(q["tokens"]) == sum(int(s["tokens"]) for s in mine.values())
        assert float(q["usd_per_million_tokens"]) == pytest.approx(float(q["total_usd"]) / int(q["tokens"]) * 1e6,
                                                                   rel=1e-6)
        # below the peak's rate, a token of the day costs more than the floor the peak gives
        assert float(q["usd_per_million_tokens"]) > float(q["usd_per_million_tokens_at_peak"])
    per_million = float(total["total_usd"]) / int(total["tokens"]) * 1e6
    assert float(total["usd_per_million_tokens"]) == pytest.approx(per_million, rel=1e-6)
    md = (out / "twin_forecast.md").read_text(encoding="utf-8")
    assert (f"per quarter; 2 quarters cost ${float(total['total_usd']):,.2f}, ${per_million:.4f} per million tokens at "
            "the day's real volume") in md
    beta_share = int(services[-1]["tokens"]) / int(quarters[-1]["tokens"])
    # the headline says how much of its volume rests on a day no file states
    beta_total = sum(int(s["tokens"]) for s in services if s["service"] == "beta") / int(total["tokens"])
    assert f"({beta_total:.0%} of those tokens of services that state no day, priced flat)" in md.splitlines()[2]
    assert ("Flat because no day is stated and its log spans none, every hour at its busiest hour's rate (an "
            f"assumption: state `traffic.profile`): beta ({beta_share:.0%} of the tokens).") in md
    assert [s["day_profile"] for s in services[:2]] == [
        "stated: diurnal (cosine) day, peak 3× the trough, busiest at 14:00",
        "flat, as no day is stated and the log spans none (every hour carries the source's load)"]


def test_a_fleet_service_s_day_is_reserved_at_its_fleet_forecast_s_terms(tmp_path):
    """A fleet's service states no forecast (the fleet refuses one), so its day section read "no
    reserved discount stated" and priced a fleet reserved all day at on demand, while its fleet's
    forecast reserves at 30% off (an outside audit of fleet_2027q1). The fleet's terms now apply where
    the service states none; a service's own autoscaling.reserved_discount still comes first."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import service_section

    day = {"shape": "diurnal", "peak_to_trough": 3, "peak_hour": 14}
    alpha, beta = service("alpha", 30.0), service("beta", 12.0, autoscaling={"reserved_discount": 0.1})
    alpha["traffic"].update(mean_rps=24.0, profile=day)
    beta["traffic"].update(mean_rps=9.0, profile=day)

    def per_day(text, policy):
        return float(re.search(rf"\| {policy} \| \$([\d,.]+) \|", text).group(1).replace(",", ""))

    def reserved_at(text, discount):
        on_demand = per_day(text, "peak-sized fleet all day, on demand")
        return per_day(text, "peak-sized fleet all day, reserved") == pytest.approx(on_demand * (1 - discount), abs=0.01)

    # without a forecast the fleet states no terms: each service's own, as in its own report
    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, services=[alpha, beta])), explore=False)
    assert "reserved prices: on-demand × (1 − 0) (no reserved discount stated)" in service_section(fp, 0)
    beta_text = service_section(fp, 1)
    assert "on-demand × (1 − 0.1) (autoscaling.reserved_discount)" in beta_text and reserved_at(beta_text, 0.1)
    # with one, its terms, for every service's day as for the GPUs it commits: a service's own discount beside
    # them (priced its day at one price and committed its GPUs at another) is refused, as in a scenario
    forecast = {"reserved_discount": 0.25, "reserved_prices": {"l40s": 0.5}, "quarters": [{"quarter": "2027Q1"}]}
    path = write_fleet(tmp_path, services=[alpha, beta], forecast=forecast)
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2 and not (tmp_path / "out").exists()
    assert (f"{path}: services[1]: autoscaling.reserved_discount: reserved terms are given once, and this fleet's "
            "forecast gives them") in r.output
    beta.pop("autoscaling")
    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, services=[alpha, beta], forecast=forecast)), explore=False)
    for i in (0, 1):
        text = service_section(fp, i)
        assert ("reserved prices: on-demand × (1 − 0.25) (the fleet's forecast.reserved_discount); l40s $0.50 (the "
                "fleet's forecast.reserved_prices)") in text
        assert reserved_at(text, 0.25) == (not fp.plans[i].solution.gpus_by_type.get("l40s"))


def test_a_fleet_forecast_refuses_a_stated_peak_below_the_rate_its_day_is_read_at(tmp_path):
    """A service's day's volume is read from its source; with a peak stated below the source's rate,
    its tokens at the day's volume were three times those at its peak, and the fleet's price per token
    at the day's volume fell below the floor the peak gives. A scenario's own forecast refuses this; a
    fleet's service has none, so nothing did."""
    synthetic = {"synthetic": {"name": "chat", "requests": 20000, "seed": 3, "rate_rps": 30}}
    alpha = service("alpha", 10.0)
    alpha["traffic"]["source"] = synthetic
    forecast = {"quarters": [{"quarter": "2027Q1"}]}
    path = write_fleet(tmp_path, services=[alpha, service("beta", 12.0)], forecast=forecast)
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2 and not (tmp_path / "out").exists()
    assert f"{path}: services[0]: traffic: peak: 10 req/s is below the source's own rate" in r.output
    assert "state traffic.mean_rps (the busiest hour's mean at this peak)" in r.output
    # stated, the busiest hour's mean rate is the day's: the forecast runs
    alpha["traffic"]["mean_rps"] = 8.0
    path = write_fleet(tmp_path, services=[alpha, service("beta", 12.0)], forecast=forecast)
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output


def test_the_fleet_headline_names_the_services_that_turn_requests_away():
    from types import SimpleNamespace

    from planner.fleet_report import not_served

    def plan(name, rejected, requests):
        return SimpleNamespace(scenario=SimpleNamespace(name=name), rejected_requests=rejected,
                               rejected_share=rejected / requests)

    assert not_served([plan("a", 0, 100)]) == []
    assert not_served([plan("a", 1, 100), plan("b", 0, 100), plan("c", 30, 100)]) == [
        "Not served, so in neither the costs nor the tokens: the requests over a service's context limit (c 30.0%, "
        "a 1.0%).", ""]


def test_a_fleet_quarter_pricing_a_type_nobody_runs_is_refused(tmp_path):
    path = write_fleet(tmp_path, forecast={"quarters": [{"quarter": "2027Q1", "prices": {"b200": 1.0}}]})
    r = CliRunner().invoke(main, ["forecast", str(path), "--no-report"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: {path}: forecast.quarters[0].prices.b200: no service may run b200 and the "
                                "inventory has none, so this would change nothing; add it to a service's gpus or the "
                                "inventory")


def test_a_service_may_state_the_inventory_s_own_price_again(tmp_path):
    """A type priced in the inventory has the fleet's price; a service that states the same one
    (say, a scenario file shared with a single-service plan) is not told to state it there."""
    shared = {"gpus": [{"id": "h100-sxm", "price_usd_per_hour": 2.2}], "kv_dtypes": ["bf16"]}
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, **shared), service("beta", 3.0, **shared)],
                       inventory={"h100-sxm": {"price_usd_per_hour": 2.2}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["cost_usd_per_hour"] == pytest.approx(2.2 * doc["gpus"])


def test_a_fleet_file_where_a_scenario_is_expected_is_named_as_such(tmp_path):
    path = write_fleet(tmp_path)
    r = CliRunner().invoke(main, ["simulate", str(path)])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: {path}: this is a fleet file (it lists services:), where one scenario is "
                                "expected: give one of its services' scenario files (which plans that service alone, "
                                "not its share of the fleet), or use `planner solve` / `planner forecast` on the fleet "
                                "(`solve` certifies the fleet's own pools in simulation)")



def test_reduced_cost_fixing_keeps_every_plan_at_the_optimums_cost():
    """The bounds from reduced costs (ilp_solver.fix_by_reduced_costs; the tie solve's, at the
    optimum's cost) admit every plan that costs no more than asked: here 10% over the optimum, so
    that plans above it are enumerated too (24 seeds: two services on a capped type, committed GPUs
    every third seed, one or two replicas at least); and they fix some variables."""
    fixed = 0
    for seed in range(24):
        services, caps, committed, prices = instance(seed)
        prob, parts, joint = _build(services, caps, committed, False, False, None)
        if joint is None:
            continue
        prob.solve(solver_for("highs", 60.0))
        if prob.status != pulp.LpStatusOptimal:
            continue
        most = 1.1 * pulp.value(joint.cost)
        fixed += len(fix_by_reduced_costs(prob, joint.cost, most,
                                          solver_for("highs", 60.0, relaxation=True)))
        kept = 0
        for plans in itertools.product(*(cheapest_replicas_plans(sv) for sv in services)):
            used: dict[str, int] = {}
            cost = 0.0
            for _, combo in plans:
                for c, n in combo:
                    used[c.gpu] = used.get(c.gpu, 0) + n * c.gpus_per_replica
                    cost += 0.0 if c.gpu in committed else n * c.cost_per_replica_hour
            if any(used.get(g, 0) > cap for g, cap in caps.items()):
                continue
            cost += sum(n * q + prices[g] * max(0, used.get(g, 0) - n) for g, (n, q) in committed.items())
            if cost > most:
                continue
            kept += 1
            for part, (option, combo) in zip(parts, plans, strict=True):
                index = {label: i for i, label in part.label.items()}
                assert part.y[option.key].upBound in (None, 1)
                for c, n in combo:
                    i = index[(c.option, c.traffic_class, c.config)]
                    assert part.z[i].upBound == 1, (seed, c.config)
                    assert part.x[i].upBound is None or part.x[i].upBound >= n, (seed, c.config, n)
        assert kept >= 1, seed
    assert fixed > 0


def test_a_class_may_keep_a_pool_on_each_pool_type_as_on_committed_types():
    """A fleet's ILP lets a class keep a pool on each committed type beside its other pool; a service
    re-solved alone keeps that rule for the same types (pool_types), without their prices, so the
    fleet's plan for it (two capped types in one class) stays one it can make."""
    options = [SplitOption("none", None, {"all": 10.0})]
    cands = [Candidate("none", "all", "a-tp1", "a", 1, 2.0, 1.0), Candidate("none", "all", "b-tp1", "b", 1, 3.0, 1.0)]
    caps = {"a": 6, "b": 6}
    assert not solve_fleet(options, cands, inventory=caps, backend="highs").pools  # one config per pool: 6 < 10
    mixed = solve_fleet(options, cands, inventory=caps, backend="highs", pool_types=frozenset({"a", "b"}))
    assert sorted((p.gpu, p.replicas) for p in mixed.pools) == [("a", 6), ("b", 4)]
    assert mixed.cost_per_hour == pytest.approx(6 * 2.0 + 4 * 3.0)  # on-demand prices: no commitment priced


def test_a_fleet_forecast_shows_a_cap_the_fleet_runs_up_against(tmp_path):
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    path = write_fleet(tmp_path, forecast={"quarters": [{"quarter": "2027Q1", "availability": {"h100-sxm": 1}}]})
    fleet = load_fleet(path)
    (q1,) = run_fleet_forecast(fleet)
    (h100,) = [t for t in q1.plan.types if t.gpu == "h100-sxm"]
    assert (h100.cap, h100.used) == (1, 1)
    types = fleet_forecast_tables([q1])["types"].splitlines()
    row = next(line for line in types if line.startswith("2027Q1,h100-sxm,"))
    assert row.split(",")[types[0].split(",").index("cap_binds")] == "true"
    md = fleet_forecast_markdown("twin", [q1], fleet)
    assert "| 2027Q1 | h100-sxm | 0 | 1 | 1 | 1 (binds) | $2.99 | $2.99 |" in md
    assert "At its cap (2027Q1 h100-sxm), the fleet runs no more GPUs of the type" in md


def _csv_rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def _md_limit_rows(md: str) -> dict[tuple[str, str], dict]:
    """The forecast Markdown's priced limits by (quarter, constraint): its cells, the dollars as numbers."""
    out = {}
    for line in md.splitlines():
        m = re.match(r"^\| (\d{4}Q\d) \| (.+?) ≤ ([\d,]+) \((.*)\) \| ([\d,]+) \| (yes|no) \| (.*) \|$", line)
        if m:
            quarter, name, limit, source, used, binds, money = m.groups()
            cells = [c.strip() for c in money.split("|")]
            dollars = [float(c.rstrip(" †").lstrip("$").replace(",", "").replace("−", "-")) for c in cells]
            out[(quarter, name)] = {"limit": int(limit.replace(",", "")), "source": source, "used": int(used.replace(",", "")),
                                    "binds": binds == "yes", "usd": dollars, "marked": [c.endswith("†") for c in cells]}
    return out


def _agrees(shown: dict, row: dict[str, str]) -> None:
    """A Markdown row (_md_limit_rows) against its limits CSV row: the same limit, costs to the cent,
    savings the unrounded costs' difference to the cent."""
    base, plus, removed = (float(row[k]) for k in ("fleet_usd_per_hour", "plus_one_usd_per_hour", "removed_usd_per_hour"))
    assert (shown["limit"], shown["source"], shown["used"], shown["binds"]) == (
        int(row["limit"]), row["source"], int(row["used"]), row["binds"] == "true")
    assert shown["usd"] == pytest.approx([base, plus, base - plus, removed, base - removed], abs=0.0051)
    assert set(shown["marked"][1:]) == {row["proven"] != "true"}


def test_a_fleet_forecast_prices_a_binding_cap_as_its_quarter_planned_with_it_raised_and_dropped(tmp_path):
    """A quarter whose availability binds prices the cap by re-solving that quarter: one more GPU
    allowed costs what the quarter costs planned with one more available, no cap what it costs
    planned without one. The limits table, the JSON and the Markdown show those costs and name the
    quarter's availability, and the GPUs held, as the cap's source."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_json,
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    held = {"h100-sxm": {"reserved": 1, "reserved_usd_per_hour": 2.0}}

    def quarter(name: str, availability: dict | None):
        folder = tmp_path / name
        folder.mkdir()
        stated = {"quarter": "2027Q1", **({"availability": availability} if availability else {})}
        fleet = load_fleet(write_fleet(folder, inventory=held, forecast={"quarters": [stated]}))
        (q,) = run_fleet_forecast(fleet)
        return fleet, q

    fleet, q1 = quarter("capped", {"h100-sxm": 2})
    (cap,) = q1.plan.constraints
    assert (cap.name, cap.gpu, cap.limit, cap.used, cap.binds, cap.proven) == ("h100-sxm GPUs", "h100-sxm", 2, 2, True, True)
    assert cap.limit_text == "forecast.quarters[0].availability; 1 owned or committed"
    assert cap.plus_one_usd_per_hour == pytest.approx(quarter("one_more", {"h100-sxm": 3})[1].cost_per_hour)
    assert cap.removed_usd_per_hour == pytest.approx(quarter("uncapped", None)[1].cost_per_hour)
    assert cap.removed_usd_per_hour < q1.cost_per_hour - 0.01  # a cap that costs

    (row,) = _csv_rows(fleet_forecast_tables([q1])["limits"])
    assert (row["quarter"], row["constraint"], row["gpu"], row["limit"], row["binds"]) == (
        "2027Q1", "h100-sxm GPUs", "h100-sxm", "2", "true")
    assert float(row["plus_one_usd_per_hour"]) == pytest.approx(cap.plus_one_usd_per_hour, abs=1e-6)
    assert float(row["removed_usd_per_hour"]) == pytest.approx(cap.removed_usd_per_hour, abs=1e-6)
    assert float(row["fleet_usd_per_hour"]) == pytest.approx(q1.cost_per_hour, abs=1e-6)
    (listed,) = fleet_forecast_json([q1])["quarters"][0]["limits"]
    assert (listed["constraint"], listed["limit"]) == ("h100-sxm GPUs", 2)
    assert listed["removed_usd_per_hour"] == pytest.approx(cap.removed_usd_per_hour)
    md = fleet_forecast_markdown("twin", [q1], fleet)
    _agrees(_md_limit_rows(md)[("2027Q1", "h100-sxm GPUs")], row)
    assert "(what one more GPU, and no cap, would save there: below)" in md
    hours = 2190  # a quarter's, as the rest of the forecast counts them
    assert (f"Over its quarter (2,190 hours), what each saves: 2027Q1 h100-sxm GPUs, "
            f"{usd_text((q1.cost_per_hour - cap.plus_one_usd_per_hour) * hours)} with one more allowed and "
            f"{usd_text((q1.cost_per_hour - cap.removed_usd_per_hour) * hours)} without it.") in md
    assert "Without carry_forward, a quarter's limit changes that quarter only." in md
    # without carry_forward (and in a forecast's last quarter) a limit saves its own quarter's alone; no term
    # prices what is held after the end
    assert float(row["removed_saves_to_end_usd"]) == pytest.approx((q1.cost_per_hour - cap.removed_usd_per_hour) * hours)
    assert row["removed_saves_after_end_usd"] == ""


def _md_to_end_rows(md: str) -> dict[tuple[str, str], list[str]]:
    """The forecast Markdown's table of limits priced through its last quarter, by (quarter, constraint): its cells."""
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| Quarter | Limit | One more allowed: its quarter"))
    out = {}
    for line in itertools.takewhile(bool, lines[head + 2:]):
        quarter, limit, *cells = (c.strip() for c in line.strip("|").split("|"))
        out[(quarter, limit)] = cells
    return out


HELD_H100 = {"reserved": 1, "reserved_usd_per_hour": 2.0}


def _carried_forecast(tmp_path: Path, name: str, quarters: list[dict], *, inventory: dict | None = None, term: int = 2,
                      **fleet):
    """A forecast of the twin fleet with carry_forward, a quarter per item of `quarters` (its keys: the
    quarter's, over a growth of 40% on the last), from 2027Q1 on; commitments held `term` quarters."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import run_fleet_forecast

    folder = tmp_path / name
    folder.mkdir()
    stated = [{"quarter": f"2027Q{i + 1}", **({"growth": 0.4} if i else {}), **q} for i, q in enumerate(quarters)]
    forecast = {"carry_forward": True, "commitment_term_quarters": term, "reserved_discount": 0.3, "quarters": stated}
    loaded = load_fleet(write_fleet(folder, inventory={"h100-sxm": inventory or HELD_H100}, forecast=forecast, **fleet))
    return loaded, run_fleet_forecast(loaded)


def _saved_apart(planned, other, term: int) -> tuple[float, float]:
    """What `other`, a forecast of the same fleet, saves against `planned` through its last quarter, and on the
    commitments held after it."""
    last = len(planned) - 1
    return (sum(p.cost_per_hour - o.cost_per_hour for p, o in zip(planned, other, strict=True)) * 2190,
            committed_after_end_usd(planned[-1].lots, last, term) - committed_after_end_usd(other[-1].lots, last, term))


def _priced_apart(tmp_path, quarters: list[dict], quarter: int, relaxed: dict[str, tuple[list[dict], dict]], **kw):
    """A carried forecast's limit of `quarter` (the only one of its quarter), and for each relaxation
    (plus_one, removed: the quarters and fleet keywords of a forecast stating it from the start) what
    its ToEnd says it saves, and what that forecast saves against this one; each pair to compare."""
    fleet, planned = _carried_forecast(tmp_path, "planned", quarters, **kw)
    (cap,) = planned[quarter].plan.constraints
    priced = planned[quarter].to_end[cap.name]
    assert cap.proven and priced.proven
    apart = {}
    for what, (stated, changed) in relaxed.items():
        _, other = _carried_forecast(tmp_path, what, stated, **{**kw, **changed})
        relaxed = getattr(priced, what)
        apart[what] = ((relaxed.saves_to_end_usd, relaxed.saves_after_end_usd), _saved_apart(planned, other, kw.get("term", 2)))
    return fleet, planned, cap, priced, apart


def test_a_fleet_forecast_prices_a_cap_through_the_quarters_its_relaxed_quarter_is_carried_into(tmp_path):
    """With carry_forward, what a quarter runs is committed from the next quarter on: a cap lifted in
    2027Q1 changes 2027Q2 and 2027Q3 too (and what is held after them; commitments held two quarters
    expire within the forecast). What the limits table says each relaxation saves through the last
    quarter, and after it, is what two forecasts cost apart: this one, and the same fleet planned with
    2027Q1's availability one higher, or none, from the start."""
    from planner.fleet_forecast import fleet_forecast_markdown, fleet_forecast_tables

    fleet, planned, cap, priced, apart = _priced_apart(tmp_path, [{"availability": {"h100-sxm": 2}}, {}, {}], 0, {
        "plus_one": ([{"availability": {"h100-sxm": 3}}, {}, {}], {}), "removed": ([{}, {}, {}], {})})
    assert cap.binds
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)
    # the relaxed quarter changes the next ones: what it saves there is not its own quarter's
    assert priced.removed.saves_to_end_usd != pytest.approx((planned[0].cost_per_hour - cap.removed_usd_per_hour) * 2190)
    assert priced.removed.why == priced.plus_one.why == ""

    row = next(r for r in _csv_rows(fleet_forecast_tables(planned)["limits"]) if r["quarter"] == "2027Q1")
    assert [float(row[k]) for k in ("plus_one_saves_to_end_usd", "plus_one_saves_after_end_usd",
                                    "removed_saves_to_end_usd", "removed_saves_after_end_usd")] == pytest.approx(
        [priced.plus_one.saves_to_end_usd, priced.plus_one.saves_after_end_usd, priced.removed.saves_to_end_usd,
         priced.removed.saves_after_end_usd], abs=1e-6)
    assert (row["plus_one_to_end_why"], row["removed_to_end_why"], row["to_end_proven"]) == ("", "", "true")
    md = fleet_forecast_markdown("twin", planned, fleet)
    assert "the table after this one prices each relaxation through 2027Q3." in md
    assert ("| Quarter | Limit | One more allowed: its quarter | from its quarter through 2027Q3 | after 2027Q3 | "
            "Without it: its quarter | from its quarter through 2027Q3 | after 2027Q3 |") in md
    assert _md_to_end_rows(md)[("2027Q1", "h100-sxm GPUs")] == [
        usd_text((planned[0].cost_per_hour - cap.plus_one_usd_per_hour) * 2190), usd_text(priced.plus_one.saves_to_end_usd),
        usd_text(priced.plus_one.saves_after_end_usd), usd_text((planned[0].cost_per_hour - cap.removed_usd_per_hour) * 2190),
        usd_text(priced.removed.saves_to_end_usd), usd_text(priced.removed.saves_after_end_usd)]
    assert "Over its quarter (2,190 hours), what each saves" not in md
    # What the rows are measured against, beside the forecast's own quarters: uncertified, the model's re-plan
    # from 2027Q1 as planned is the forecast's own 2027Q2 and 2027Q3 (certified, an outside audit found the
    # shipped fleet's re-plan a GPU's price away from them, and subtracted a saving from the wrong total).
    assert planned[0].replanned.usd_per_hour == pytest.approx([q.cost_per_hour for q in planned[1:]], rel=1e-12)
    own = sum(q.cost_per_hour for q in planned[1:]) * 2190
    after = committed_after_end_usd(planned[-1].lots, 2, 2)
    assert (f"What 2027Q1's savings are measured against: from 2027Q1 as planned, the model re-plans 2027Q2–2027Q3 at "
            f"{usd_text(own)}, where this forecast's own quarters cost {usd_text(own)} (apart: 2027Q2 $0.00; 2027Q3 "
            f"$0.00), and commits {usd_text(after)} after 2027Q3 where the forecast commits {usd_text(after)} ($0.00 "
            "apart). Each saving is the difference between this re-plan and one from the relaxed quarter") in md


def test_a_quarter_s_availability_relaxed_after_the_first_is_priced_from_the_lots_it_starts_from(tmp_path):
    """A cap of 2027Q2's availability, the quarter starting from what 2027Q1 committed, priced through
    2027Q3 as forecasts stating 2027Q2's availability one higher, and none, cost apart; 2027Q3 keeps
    its own availability, and the inventory its own max_new."""
    inventory = {**HELD_H100, "max_new": 20}
    quarters = lambda q2: [{}, {"availability": {"h100-sxm": q2}} if q2 else {}, {"availability": {"h100-sxm": 20}}]  # noqa: E731
    _, _, cap, _, apart = _priced_apart(tmp_path, quarters(5), 1, {"plus_one": (quarters(6), {}), "removed": (quarters(None), {})},
                                        inventory=inventory)
    assert cap.binds
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)


def test_a_fleets_rule_on_gpu_types_relaxed_in_a_quarter_stays_relaxed_after_it(tmp_path):
    """max_gpu_types holds in every quarter: relaxed in 2027Q1, it stays raised by one (or dropped) in
    the quarters after it, as forecasts of the fleet with the rule one higher, and without it, cost apart."""
    quarters = [{}, {}, {}]
    _, _, cap, _, apart = _priced_apart(tmp_path, quarters, 0, {"plus_one": (quarters, {"max_gpu_types": 2}),
                                                                "removed": (quarters, {"max_gpu_types": None})}, max_gpu_types=1)
    assert (cap.gpu, cap.limit, cap.binds) == (None, 1, True)
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)


def test_an_inventory_cap_relaxed_in_a_quarter_stays_relaxed_in_the_quarters_that_keep_it(tmp_path):
    """A cap of the inventory (owned + reserved + max_new) holds in every quarter: what a quarter runs
    past it is committed in the next, where the same cap would refuse it. Priced through the last
    quarter, it stays raised by one (or dropped) there, as two forecasts of the fleet with max_new one
    higher, and with none, cost apart."""
    _, planned, cap, priced, apart = _priced_apart(tmp_path, [{}, {}], 0, {
        "plus_one": ([{}, {}], {"inventory": {**HELD_H100, "max_new": 2}}), "removed": ([{}, {}], {"inventory": HELD_H100})},
        inventory={**HELD_H100, "max_new": 1})
    assert (cap.limit, cap.limit_text, cap.binds) == (2, "1 reserved + 1 new in the inventory", True)
    assert priced.removed.why == priced.plus_one.why == ""
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)
    assert priced.removed.saves_to_end_usd > (planned[0].cost_per_hour - cap.removed_usd_per_hour) * 2190 + 1.0


def test_an_inventory_cap_that_costs_nothing_in_its_quarter_is_priced_from_the_next_that_keeps_it(tmp_path):
    """2027Q1 runs all the inventory's cap allows at no cost (dropping it finds no cheaper 2027Q1), but
    the same cap costs in 2027Q2 and 2027Q3: raised from 2027Q1 on, it saves what forecasts of the fleet
    with max_new one higher, and with none, save, which is what the 2027Q2 row prices from there; and
    the forecast's Markdown shows the 2027Q1 row though its quarter saves nothing."""
    from planner.fleet_forecast import fleet_forecast_markdown

    fleet, planned, cap, priced, apart = _priced_apart(tmp_path, [{}, {}, {}], 0, {
        "plus_one": ([{}, {}, {}], {"inventory": {**HELD_H100, "max_new": 4}}), "removed": ([{}, {}, {}], {"inventory": HELD_H100})},
        inventory={**HELD_H100, "max_new": 3})
    assert cap.binds and cap.removed_usd_per_hour == pytest.approx(planned[0].cost_per_hour)  # nothing in its own quarter
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)
        assert shown[0] > 1.0
    (q2,) = planned[1].plan.constraints
    assert (priced.plus_one.saves_to_end_usd, priced.removed.saves_to_end_usd) == pytest.approx(
        (planned[1].to_end[q2.name].plus_one.saves_to_end_usd, planned[1].to_end[q2.name].removed.saves_to_end_usd))
    assert _md_to_end_rows(fleet_forecast_markdown("twin", planned, fleet))[("2027Q1", "h100-sxm GPUs")][4] == usd_text(
        priced.removed.saves_to_end_usd)


CAPPED_H100 = {**HELD_H100, "max_new": 3}  # the inventory's cap: 4 H100s


@pytest.mark.parametrize(("quarters", "plus_one", "removed", "chained"), [
    # 2027Q1's own availability, reached by no one: raised there alone it saves nothing, though the inventory's cap,
    # the same type's in 2027Q2 and 2027Q3, costs there
    ([{"growth": -0.3, "availability": {"h100-sxm": 4}}, {}, {}],
     ([{"growth": -0.3, "availability": {"h100-sxm": 5}}, {}, {}], {}), ([{"growth": -0.3}, {}, {}], {}), False),
    # the inventory's cap, kept raised past 2027Q2, whose own availability it does not reach, into 2027Q3
    ([{}, {"availability": {"h100-sxm": 4}}, {}], ([{}, {"availability": {"h100-sxm": 4}}, {}], {"inventory": {**HELD_H100, "max_new": 4}}),
     ([{}, {"availability": {"h100-sxm": 4}}, {}], {"inventory": HELD_H100}), True),
    # the inventory's cap, costing nothing in 2027Q1 and 2027Q2: priced from 2027Q3 on, through two rows
    ([{"growth": -0.3}, {}, {}, {}], ([{"growth": -0.3}, {}, {}, {}], {"inventory": {**HELD_H100, "max_new": 4}}),
     ([{"growth": -0.3}, {}, {}, {}], {"inventory": HELD_H100}), True),
])
def test_a_limit_that_costs_nothing_in_its_quarter_saves_what_it_saves_where_it_holds_after(tmp_path, quarters, plus_one,
                                                                                              removed, chained):
    """2027Q1's H100 limit saves nothing in its own quarter. What its row says each relaxation saves is
    what a forecast stating that relaxation from the start saves: the inventory's cap kept raised in the
    quarters that keep it, a quarter's availability raised in its own alone."""
    _, planned, cap, _, apart = _priced_apart(tmp_path, quarters, 0, {"plus_one": plus_one, "removed": removed},
                                              inventory=CAPPED_H100)
    assert cap.removed_usd_per_hour == pytest.approx(planned[0].cost_per_hour)
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)
        assert (shown[0] > 1.0) == chained


def test_a_relaxed_quarter_carries_the_gpus_it_runs_not_an_idle_commitment_counted_in_use(tmp_path):
    """Four L40S reserved in 2027Q1 for that quarter alone are free in it: re-solved by cost alone, the
    quarter without its H100 cap may count an idle one of them in use, which carry_forward would commit
    again in 2027Q2 for nothing. The relaxed re-solve breaks its ties as the plan does, so the saving
    is what a forecast without the cap saves (by cost alone it read one L40S a quarter less)."""
    quarters = lambda cap: [{"reserved": {"l40s": 4}, **({"availability": {"h100-sxm": cap}} if cap else {})},  # noqa: E731
                            {"growth": -0.5}, {"growth": 0.0}]
    _, _, cap, _, apart = _priced_apart(tmp_path, quarters(2), 0, {"plus_one": (quarters(3), {}), "removed": (quarters(None), {})},
                                        term=1)
    assert cap.binds
    for shown, measured in apart.values():
        assert shown == pytest.approx(measured)


def test_a_cap_whose_relaxed_quarter_commits_more_than_the_next_allows_is_not_priced_past_it(tmp_path):
    """Uncapped, 2027Q1 runs more H100s than 2027Q2 makes available: carried forward, they cannot be
    held there, so the rest of the forecast has no price for it, and the table and Markdown say why."""
    from planner.fleet_forecast import fleet_forecast_markdown, fleet_forecast_tables

    fleet, planned = _carried_forecast(tmp_path, "tight", [{"availability": {"h100-sxm": 2}}, {"availability": {"h100-sxm": 2}}])
    cap = planned[0].plan.constraints[0]
    priced = planned[0].to_end[cap.name]
    held = dict(cap.removed_gpus)["h100-sxm"]
    assert cap.binds and held > 2
    assert priced.removed.saves_to_end_usd is None and priced.removed.saves_after_end_usd is None
    assert priced.removed.why == ("the quarters after it cannot be re-planned by the model from the relaxed quarter: "
                                  f"carried forward, 2027Q2 would hold {held} h100-sxm GPUs committed, over its "
                                  "availability of 2")
    row = next(r for r in _csv_rows(fleet_forecast_tables(planned)["limits"]) if r["quarter"] == "2027Q1")
    assert row["removed_saves_to_end_usd"] == row["removed_saves_after_end_usd"] == ""
    assert row["removed_to_end_why"] == priced.removed.why
    md = fleet_forecast_markdown("twin", planned, fleet)
    cells = _md_to_end_rows(md)[("2027Q1", "h100-sxm GPUs")]
    for shown, why in ((cells[1], priced.plus_one.why), (cells[4], priced.removed.why)):
        n = shown.removeprefix("— (").removesuffix(")")  # each reason once, numbered, after the table
        assert why and shown == f"— ({n})" and f"({n}) 2027Q1 h100-sxm GPUs: {why}." in md
    assert cells[5] == "—"
    # the last quarter's limits change nothing after it: what they save is their quarter's
    (last,) = planned[-1].plan.constraints
    assert last.binds and last.removed_usd_per_hour < planned[-1].cost_per_hour - 0.01
    priced = planned[-1].to_end[last.name]
    assert (priced.plus_one.saves_to_end_usd, priced.removed.saves_to_end_usd) == pytest.approx(
        ((planned[-1].cost_per_hour - last.plus_one_usd_per_hour) * 2190, (planned[-1].cost_per_hour - last.removed_usd_per_hour) * 2190))
    assert priced.plus_one.saves_after_end_usd == priced.removed.saves_after_end_usd == 0.0


def test_a_cap_a_fleet_forecast_stays_under_that_still_costs_is_in_its_table_and_explained(tmp_path):
    """A cap of one H100 keeps services that need two replicas a pool off the type altogether: the
    quarter runs none, the cap does not bind, yet dropping it saves. It has a row in the limits table
    (the types table has none for a type the quarter neither runs nor holds) and in the Markdown, with
    the reason."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    fleet = load_fleet(write_fleet(
        tmp_path, services=[service("alpha", 30.0, min_replicas_per_pool=2), service("beta", 12.0, min_replicas_per_pool=2)],
        inventory={"h100-sxm": {"max_new": 1}}, forecast={"quarters": [{"quarter": "2027Q1"}]}))
    (q1,) = run_fleet_forecast(fleet)
    assert "h100-sxm" not in {t.gpu for t in q1.plan.types}
    (row,) = _csv_rows(fleet_forecast_tables([q1])["limits"])
    assert (row["gpu"], row["used"], row["binds"], row["source"]) == ("h100-sxm", "0", "false", "1 new in the inventory")
    assert float(row["removed_usd_per_hour"]) < q1.cost_per_hour - 0.01
    md = fleet_forecast_markdown("twin", [q1], fleet)
    _agrees(_md_limit_rows(md)[("2027Q1", "h100-sxm GPUs")], row)
    assert ("The 2027Q1 h100-sxm GPUs limit does not bind, yet dropping it saves: the plan uses less than it allows, "
            "and the cheaper fleet it rules out runs more of the type than it allows (a pool on it larger than the "
            "cap)") in md


def test_a_fleet_forecast_prices_its_rule_on_gpu_types_as_its_quarter_planned_with_it_raised_and_dropped(tmp_path):
    """Two owned L40S at $0.50 an hour make the cheapest fleet run them beside H100s: a rule of one
    GPU type costs, and its re-solves cost what the quarter costs planned with two types allowed and
    with no rule."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    def quarter(name: str, **rule):
        folder = tmp_path / name
        folder.mkdir()
        fleet = load_fleet(write_fleet(folder, inventory={"l40s": {"owned": 2, "owned_usd_per_hour": 0.5}},
                                       forecast={"quarters": [{"quarter": "2027Q1"}]}, **rule))
        (q,) = run_fleet_forecast(fleet)
        return fleet, q

    fleet, q1 = quarter("one_type", max_gpu_types=1)
    (row,) = _csv_rows(fleet_forecast_tables([q1])["limits"])
    assert (row["constraint"], row["gpu"], row["limit"], row["source"], row["used"], row["binds"]) == (
        "GPU types", "", "1", "max_gpu_types", "1", "true")
    assert float(row["plus_one_usd_per_hour"]) == pytest.approx(quarter("two_types", max_gpu_types=2)[1].cost_per_hour,
                                                                abs=1e-6)
    assert float(row["removed_usd_per_hour"]) == pytest.approx(quarter("no_rule")[1].cost_per_hour, abs=1e-6)
    assert float(row["removed_usd_per_hour"]) < q1.cost_per_hour - 0.01
    _agrees(_md_limit_rows(fleet_forecast_markdown("twin", [q1], fleet))[("2027Q1", "GPU types")], row)


def test_a_fleet_forecast_whose_re_solve_stopped_at_its_time_limit_marks_the_row_and_says_why(tmp_path, monkeypatch):
    """A quarter's re-solve that stops at solver.time_limit_s on a dearer fleet is clamped to the
    quarter's cost and marked †, with the note naming the quarter's status (the forecast's Markdown
    once failed to render such a row)."""

    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    _re_solves_stop_at_their_time_limit(monkeypatch)
    fleet = load_fleet(write_fleet(tmp_path, max_gpu_types=1, forecast={"quarters": [{"quarter": "2027Q1"}]}))
    (q1,) = run_fleet_forecast(fleet)
    (row,) = _csv_rows(fleet_forecast_tables([q1])["limits"])
    assert row["proven"] == "false" and float(row["removed_usd_per_hour"]) == pytest.approx(q1.cost_per_hour, abs=1e-6)
    md = fleet_forecast_markdown("twin", [q1], fleet)
    _agrees(_md_limit_rows(md)[("2027Q1", "GPU types")], row)
    assert ("† Not proven: the quarter's solve or a re-solve stopped at `solver.time_limit_s` (60 s) before proving its "
            "optimum (how each quarter's own solve ended: 2027Q1 Optimal).") in md
    assert "No shared limit binds" not in md


def test_a_fleet_forecast_whose_limits_cost_nothing_says_so_and_one_without_limits_says_nothing(tmp_path):
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_markdown,
        fleet_forecast_tables,
        run_fleet_forecast,
    )

    quarters = {"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 1.1}]}
    roomy = load_fleet(write_fleet(tmp_path, forecast=quarters, inventory={"h100-sxm": {"max_new": 1000}}))
    results = run_fleet_forecast(roomy)
    assert [len(r.plan.constraints) for r in results] == [1, 1]
    md = fleet_forecast_markdown("twin", results, roomy)
    assert ("## What the shared limits cost\n\nNo shared limit binds in any quarter or rules out a cheaper fleet: "
            "re-solved without each, every quarter's fleet costs the same.") in md
    (tmp_path / "free").mkdir()
    free = load_fleet(write_fleet(tmp_path / "free", forecast=quarters))
    results = run_fleet_forecast(free)
    assert "## What the shared limits cost" not in fleet_forecast_markdown("twin", results, free)
    assert fleet_forecast_tables(results)["limits"].splitlines()[1:] == []


def test_the_shipped_fleet_forecast_prices_its_limits_as_its_limits_table_does():
    """fleet_2027q1's limits: the Markdown shows exactly the rows of the limits table that bind, cost
    or are unproven, at its costs; the binding Q2 H100 cap names the inventory's GPUs and the
    forecast's own commitments it counts."""
    root = Path(__file__).resolve().parent.parent
    md = (root / "reports" / "fleet_2027q1_forecast.md").read_text(encoding="utf-8")
    rows = _csv_rows((root / "reports" / "fleet_2027q1_forecast_limits.csv").read_text(encoding="utf-8"))
    shown = _md_limit_rows(md)
    costing = [r for r in rows if r["binds"] == "true" or r["proven"] != "true"
               or float(r["fleet_usd_per_hour"]) - float(r["removed_usd_per_hour"]) >= COST_TOLERANCE_USD]
    assert costing and list(shown) == [(r["quarter"], r["constraint"]) for r in costing]
    for r in costing:
        _agrees(shown[(r["quarter"], r["constraint"])], r)
    # and over the rest of the forecast (carry_forward), each proven limit that costs in its quarter or after it
    # (the 2027Q1 row of the same H100 cap: it costs nothing there, and from 2027Q2 on what that row says)
    def saves_after(r: dict[str, str]) -> bool:
        base = float(r["fleet_usd_per_hour"])
        return any(abs(float(r[f"{what}_saves_to_end_usd"]) - (base - float(r[f"{what}_usd_per_hour"])) * 2190) >= 0.005
                   or abs(float(r[f"{what}_saves_after_end_usd"])) >= 0.005 for what in ("plus_one", "removed"))

    to_end = _md_to_end_rows(md)
    saving = [r for r in rows if r["proven"] == "true" and (saves_after(r) or float(r["fleet_usd_per_hour"])
                                                             - float(r["removed_usd_per_hour"]) >= COST_TOLERANCE_USD)]
    assert [(r["quarter"], r["constraint"]) for r in saving] == [("2027Q1", "h100-sxm GPUs"), ("2027Q2", "h100-sxm GPUs")]
    assert list(to_end) == [(r["quarter"], r["constraint"]) for r in saving]
    # the first table's count of limits that cost nothing in their quarter names those that do later
    later_only = [r for r in saving if r not in costing]
    assert len(later_only) == 1
    assert (f"The other limits ({len(rows) - len(costing)} of {len(rows)} across the quarters) neither bind nor cost anything "
            f"in their own quarter ({len(later_only)} of them costs from a later quarter on: the table after this one).") in md
    assert [saving[0][k] for k in ("plus_one_saves_to_end_usd", "removed_saves_to_end_usd")] == [
        saving[1][k] for k in ("plus_one_saves_to_end_usd", "removed_saves_to_end_usd")]
    for r in saving:
        base = float(r["fleet_usd_per_hour"])
        shown_usd = [float(c.replace("−$", "-").lstrip("$").replace(",", "")) for c in to_end[(r["quarter"], r["constraint"])]]
        # a cent either way: the CSV's hourly costs are rounded to 6 decimals before the 2,190 hours multiply them
        assert shown_usd == pytest.approx([
            (base - float(r["plus_one_usd_per_hour"])) * 2190, float(r["plus_one_saves_to_end_usd"]),
            float(r["plus_one_saves_after_end_usd"]), (base - float(r["removed_usd_per_hour"])) * 2190,
            float(r["removed_saves_to_end_usd"]), float(r["removed_saves_after_end_usd"])], abs=0.0101)
    types = _csv_rows((root / "reports" / "fleet_2027q1_forecast_types.csv").read_text(encoding="utf-8"))
    inventory = yaml.safe_load((root / "scenarios" / "fleet_2027q1.yaml").read_text(encoding="utf-8"))["inventory"]
    for r in (r for r in rows if r["binds"] == "true"):
        held = next(int(t["committed_gpus"]) for t in types if (t["quarter"], t["gpu"]) == (r["quarter"], r["gpu"]))
        mine = inventory[r["gpu"]]
        more = held - mine.get("owned", 0) - mine.get("reserved", 0)
        assert more > 0 and r["source"] == (f"{mine['reserved']} reserved + {mine['max_new']} new in the inventory, "
                                            f"{more} of the {mine['max_new']} new already committed by the forecast")


def test_a_quarter_too_short_of_gpus_names_its_availability_as_the_caps_source(tmp_path):
    """A quarter's availability replaces its types' inventory caps; the message blamed "the inventory
    caps" alone, which the inventory's own numbers did not show."""
    path = write_fleet(tmp_path, forecast={"quarters": [{"quarter": "2027Q1", "availability": {"h100-sxm": 1, "l40s": 1}}]})
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 3, r.output
    assert "fleet.yaml: forecast quarter 2027Q1: " in r.output and "inventory caps (h100-sxm ≤ 1 GPU, l40s ≤ 1 GPU)" in r.output
    assert r.output.rstrip().endswith("(h100-sxm, l40s: capped by forecast.quarters[0].availability)"), r.output
    assert not (tmp_path / "out").exists()


def test_without_carry_forward_a_stated_commitment_holds_its_quarter_only_and_the_report_says_so(tmp_path):
    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_markdown, run_fleet_forecast

    forecast = {"carry_forward": False, "reserved_discount": 0.25,
                "quarters": [{"quarter": "2027Q1", "reserved": {"h100-sxm": 4}}, {"quarter": "2027Q2", "growth": 0.1}]}
    fleet = load_fleet(write_fleet(tmp_path, forecast=forecast))
    q1, q2 = run_fleet_forecast(fleet)
    assert [t.committed for t in q1.plan.types if t.gpu == "h100-sxm"] == [4]
    assert all(t.committed == 0 for t in q2.plan.types)
    md = fleet_forecast_markdown("twin", [q1, q2], fleet)
    assert "a commitment a quarter states (`reserved`) holds in that quarter only" in md
    assert "| 2027Q1 | +4 h100-sxm | $2.2425 | on demand $2.99 × (1 − 0.25) | 2027Q1 |" in md
    assert "to the forecast's end" not in md


def test_a_fleet_quarter_stating_fewer_reserved_than_the_inventory_holds_says_it_commits_none(tmp_path):
    """The fleet's inventory reserves 8 H100s; a quarter stating 3 commits nothing (a commitment is not
    given back), and the forecast says so, where it said nothing."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import (
        fleet_forecast_json,
        fleet_forecast_markdown,
        run_fleet_forecast,
    )

    forecast = {"quarters": [{"quarter": "2027Q1", "reserved": {"h100-sxm": 3}}]}
    inventory = {"h100-sxm": {"reserved": 8, "reserved_usd_per_hour": 2.0}}
    fleet = load_fleet(write_fleet(tmp_path, forecast=forecast, inventory=inventory))
    (q1,) = run_fleet_forecast(fleet)
    said = ("2027Q1 states 3 h100-sxm reserved (forecast.quarters[0].reserved), fewer than the 8 already held "
            "(owned or committed): a commitment is not given back before its term ends, so the quarter commits no more "
            "h100-sxm and pays for the 8 held")
    assert q1.reserved_below == (said,) and q1.added_commitments == {}
    assert [t.committed for t in q1.plan.types if t.gpu == "h100-sxm"] == [8]
    assert f"- {said}." in fleet_forecast_markdown("twin", [q1], fleet).splitlines()
    assert fleet_forecast_json([q1])["quarters"][0]["reserved_notes"] == [said]
    # each service's row lists what of its speed no measurement backs (nothing here: measured GPUs, dense models)
    assert [s["speed_unverified"] for s in fleet_forecast_json([q1])["quarters"][0]["services"]] == [[]] * len(q1.plan.plans)


def test_a_quarter_that_names_a_type_the_services_price_themselves_keeps_their_price(tmp_path):
    """Both services price the H100 at $2.00 (no inventory): a quarter's availability put the type in
    the quarter's inventory at the catalog's $2.99, and the services' own price was then refused
    as a second one ("2 $/hour here but 2.99 in the fleet")."""
    from planner.fleet import load_fleet
    from planner.fleet_forecast import run_fleet_forecast

    own = {"gpus": [{"id": "h100-sxm", "price_usd_per_hour": 2.0}], "kv_dtypes": ["bf16"]}
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, **own), service("beta", 3.0, **own)],
                       forecast={"quarters": [{"quarter": "2027Q1", "availability": {"h100-sxm": 100}}]})
    (q1,) = run_fleet_forecast(load_fleet(path))
    gpus = q1.plan.joint.gpus_by_type["h100-sxm"]
    assert gpus > 0 and q1.usd_per_hour_by_kind["on_demand"] == pytest.approx(2.0 * gpus)


def test_a_quarter_reprices_a_type_a_service_states_or_defines_itself(tmp_path):
    """The quarter's price is the fleet's, over the price a service states (checked against the
    fleet's when the fleet is read) and for a type a service defines in its catalog overrides."""
    from planner.catalog import load_catalog
    from planner.fleet import load_fleet
    from planner.fleet_forecast import run_fleet_forecast

    mine = load_catalog().gpu("h100-sxm").model_dump(mode="json", exclude={"id"})
    quarters = [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "prices": {"myh100": 1.0, "h100-sxm": 3.5}}]
    path = write_fleet(tmp_path, services=[
        service("alpha", 3.0, gpus=["myh100"], kv_dtypes=["bf16"], catalog={"gpus": {"myh100": mine}}),
        service("beta", 3.0, gpus=[{"id": "h100-sxm", "price_usd_per_hour": 2.2}], kv_dtypes=["bf16"]),
    ], inventory={"h100-sxm": {"price_usd_per_hour": 2.2}}, forecast={"quarters": quarters})
    q1, q2 = run_fleet_forecast(load_fleet(path))
    for q, prices in ((q1, {"myh100": 2.99, "h100-sxm": 2.2}), (q2, {"myh100": 1.0, "h100-sxm": 3.5})):
        assert {t.gpu: t.on_demand_usd_per_gpu_hour for t in q.plan.types} == prices
        assert q.cost_per_hour == pytest.approx(sum(t.used * prices[t.gpu] for t in q.plan.types))


def test_an_inventory_type_only_a_service_s_catalog_defines_is_refused_saying_so(tmp_path):
    """A shared type is priced and capped by the fleet, which knew nothing of a type a service defines
    in its catalog overrides: "unknown GPU 'myh100'; known: ..." sent the user to the catalog list."""
    from planner.catalog import load_catalog

    mine = load_catalog().gpu("h100-sxm").model_dump(mode="json", exclude={"id"})
    path = write_fleet(tmp_path, services=[service("alpha", 3.0, gpus=["myh100"], catalog={"gpus": {"myh100": mine}})],
                       inventory={"myh100": {"owned": 2, "owned_usd_per_hour": 1.0}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 2 and r.output.strip().endswith(
        "fleet.yaml: inventory.myh100: 'myh100' is defined only in the catalog overrides of service 'alpha'; a type "
        "the fleet shares must be known to the fleet: define it in a catalog file and give it with --catalog"), r.output
    path = write_fleet(tmp_path, inventory={"h1000": {"owned": 2, "owned_usd_per_hour": 1.0}})
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 2 and "fleet.yaml: inventory.h1000: unknown GPU 'h1000'" in r.output, r.output


def test_a_cost_per_token_with_no_token_is_blank_not_a_division_by_zero():
    from planner.units import usd_per_million_tokens

    assert usd_per_million_tokens(3.0, 1.5e6) == pytest.approx(2.0)
    assert usd_per_million_tokens(3.0, 0.0) is None


def test_committed_gpus_no_service_runs_are_paid_idle(tmp_path):
    """An inventory entry for a type no service may run is refused unless it holds GPUs: owned ones
    are paid whether used or not, and the plan shows them idle."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan

    path = write_fleet(tmp_path, inventory={"h200": {"owned": 2, "owned_usd_per_hour": 1.25}})
    fp = make_fleet_plan(load_fleet(path), explore=False)
    h200 = next(t for t in fp.types if t.gpu == "h200")
    assert (h200.committed, h200.used, h200.idle_committed) == (2, 0, 2)
    assert fp.idle_committed_usd_per_hour == pytest.approx(2.5)
    assert fp.cost_per_hour == pytest.approx(2.5 + sum(t.on_demand * t.on_demand_usd_per_gpu_hour for t in fp.types))


def test_a_fleet_of_one_service_capping_a_type_the_fleet_caps_too_keeps_both_caps(tmp_path):
    """A fleet of one service names its ILP rows as the scenario would (no prefix): its own cap and
    the fleet's on the same type took one name, and PuLP refused the model with a traceback."""
    one = service("alpha", 30.0, gpus=[{"id": "h100-sxm", "max_gpus": 20}])
    path = write_fleet(tmp_path, services=[one], inventory={"h100-sxm": {"max_new": 50}})
    lp = tmp_path / "fleet.lp"
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report", "--write-lp", str(lp)])
    assert r.exit_code == 0, r.output
    text = lp.read_text()
    assert "inventory_h100_sxm:" in text and "fleet_inventory_h100_sxm:" in text
    tight = write_fleet(tmp_path, services=[one], inventory={"h100-sxm": {"max_new": 2}})
    r = CliRunner().invoke(main, ["solve", str(tight), "--no-report"])
    assert r.exit_code == 3, r.output  # the fleet's cap still binds beside the service's own


def test_a_fleet_lp_file_with_a_service_named_from_a_digit_reads_and_solves_to_the_plan_s_cost(tmp_path):
    """The shipped fleet's .lp file (its service `128k_rollout`) began names with a digit, which the LP
    format reads as a coefficient: HiGHS and CBC refused it. Its objective leaves out the committed
    GPUs' cost, which the header now states, so a re-solve plus that constant is the plan's cost."""
    import highspy

    path = write_fleet(tmp_path, services=[service("8b_chat", 30.0), service("beta", 12.0)],
                       inventory={"h100-sxm": {"reserved": 4, "reserved_usd_per_hour": 2.0}})
    lp = tmp_path / "fleet.lp"
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report", "--write-lp", str(lp), "--json"])
    assert r.exit_code == 0, r.output
    cost = json.loads(r.output)["cost_usd_per_hour"]
    text = lp.read_text()
    assert "_8b_chat_cover_none_all" in text
    assert ("\\ The objective leaves out the committed GPUs' cost, $8.00 per hour, paid whether used or not (a "
            "constant):\n\\ add it to this file's optimum for the plan's cost.\n") in text
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    assert h.readModel(str(lp)) == highspy.HighsStatus.kOk
    h.run()
    assert h.getInfo().objective_function_value + 8.0 == pytest.approx(cost)


def test_services_whose_names_differ_in_case_keep_distinct_ilp_rows(tmp_path):
    # 'A-b' and 'a_b' name different rows (A_b_*, a_b_*): only '-', '_' and '.' are merged
    path = write_fleet(tmp_path, services=[service("A-b", 3.0), service("a_b", 3.0)])
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert r.exit_code == 0, r.output


def test_a_limit_that_binds_but_costs_nothing_is_explained():
    """A limit the plan uses in full may still cost nothing (another plan of the same cost stays
    within it): the table's "Binds: yes" beside "$0.00" gets a sentence saying so, naming only
    such limits; a binding limit that costs something, or one with room left, gets none."""
    from types import SimpleNamespace

    from planner.fleet_plan import SharedConstraint
    from planner.fleet_report import _constraints

    def fleet(*constraints):
        return SimpleNamespace(constraints=constraints, cost_per_hour=100.0, plans=(),
                               fleet=SimpleNamespace(spec=SimpleNamespace(max_gpu_types=None)))

    free = SharedConstraint("h100-sxm", 8, 8, "8 reserved", 100.0, 100.0)
    dear = SharedConstraint("h200", 4, 4, "4 new", 96.0, 90.0)
    room = SharedConstraint("l40s", 16, 3, "16 owned", 100.0, 100.0)
    text = _constraints(fleet(free, dear, room))
    assert "| h100-sxm GPUs | ≤ 8 GPUs (8 reserved) | 8 | yes | $100.00 | $0.00 | $100.00 | $0.00 |" in text
    assert "h100-sxm GPUs binds and costs nothing: dropping it finds no cheaper fleet." in text
    assert "h200" not in text.split("Binds:", 1)[1] and "l40s" not in text.split("Binds:", 1)[1]
    assert "Binds:" not in _constraints(fleet(dear, room))
    both = _constraints(fleet(free, SharedConstraint(None, 2, 2, "max_gpu_types", 100.0, 100.0)))
    assert "h100-sxm GPUs and GPU types bind and cost nothing: dropping them finds no cheaper fleet." in both
    # a forecast's quarter: what costs nothing there may cost in the quarters after it
    from planner.fleet_report import limit_notes

    assert limit_notes([("2027Q1 ", free, 100.0)], type_rule=False, in_quarter=True) == [
        "", "Binds: the plan uses all the limit allows. 2027Q1 h100-sxm GPUs binds and costs nothing: dropping it finds no "
        "cheaper fleet in its quarter."]


def test_a_fleet_forecast_s_commitments_last_their_term_and_what_runs_past_the_end_is_priced(tmp_path):
    """commitment_term_quarters: a lot the forecast makes is paid for its term and then no longer
    held (carry_forward commits the fleet again at the terms of its day); the report gives each lot
    its last quarter and prices what runs past the forecast, as --json does."""
    from planner.commitments import after_end_usd
    from planner.fleet import load_fleet
    from planner.fleet_forecast import run_fleet_forecast

    forecast = {"carry_forward": True, "reserved_discount": 0.25, "commitment_term_quarters": 2,
                "quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.3},
                             {"quarter": "2027Q3", "growth": 0.3}, {"quarter": "2027Q4", "growth": 0.3}]}
    path = write_fleet(tmp_path, forecast=forecast)
    results = run_fleet_forecast(load_fleet(path))
    for i, q in enumerate(results):
        assert all(lot.held_in(i) and lot.term_quarters == 2 for lot in q.lots)
        for t in q.plan.types:  # no inventory: what the forecast's lots hold is all that is committed
            assert t.committed == sum(lot.gpus for lot in q.lots if lot.gpu == t.gpu)
    first = [lot for lot in results[1].lots if lot.start == 1]
    assert first and all(lot in results[2].lots and lot not in results[3].lots for lot in first)
    after = after_end_usd(results[-1].lots, 3)
    expected = sum(lot.gpus * lot.usd_per_gpu_hour * 2190 for lot in results[-1].lots if lot.start == 3)
    assert after == pytest.approx(expected) and after > 0

    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["committed_after_end_usd"] == pytest.approx(after)
    # the total CSV's row, as data (an outside probe found the forecast's total only in the Markdown and the CSV)
    import csv
    [total] = list(csv.DictReader((tmp_path / "out" / "twin_forecast_total.csv").read_text(encoding="utf-8").splitlines()))
    assert set(out["total"]) == set(total)
    assert out["total"]["total_usd"] == pytest.approx(float(total["total_usd"]), abs=1e-6)
    assert out["total"]["total_usd"] == pytest.approx(sum(q["total_usd"] for q in out["quarters"]), abs=1e-6)
    md = (tmp_path / "out" / "twin_forecast.md").read_text(encoding="utf-8")
    assert "a commitment is paid for 2 quarters, used or not (forecast.commitment_term_quarters)" in md
    assert "| From | Through | GPUs committed | $/GPU-hour | Priced at | Terms of |" in md
    lot = results[1].commitments[0]
    assert f"| 2027Q2 | 2027Q3 | +{lot.gpus} {lot.gpu} | $2.2425 |" in md
    assert f": ${after:,.2f} committed after 2027Q4, which the total above does not count." in md


def test_a_limit_the_plan_stays_under_that_still_costs_is_explained(tmp_path):
    """Two services, three GPU types, at most two of them: the H200 cap is not reached (the plan runs
    none), yet dropping it saves, because the cheaper fleet it rules out runs more H200s than it
    allows. The report says why beside its table, where 'Binds: no' and a saving would contradict."""
    svc = {"traffic": {"source": {"constant": {"prompt_tokens": 2000, "output_tokens": 300}},
                       "peak": {"method": "explicit", "rps": 30.0}, "headroom": 1.2},
           "slo": {"statistic": "p99", "bands": [{"ttft_s": 1.0, "tpot_ms": 50}]},
           "gpus": ["h100-sxm", "h200", "l40s"], "kv_dtypes": ["bf16"]}
    other = {**svc, "traffic": {"source": {"constant": {"prompt_tokens": 4000, "output_tokens": 200}},
                                "peak": {"method": "explicit", "rps": 12.0}, "headroom": 1.2},
             "slo": {"statistic": "p99", "bands": [{"ttft_s": 1.5, "tpot_ms": 40}]}}
    path = write_fleet(tmp_path, services=[service("sa", 30.0, **svc), service("sb", 12.0, **other)], max_gpu_types=2,
                       inventory={"h100-sxm": {"reserved": 2, "reserved_usd_per_hour": 2.0, "max_new": 2},
                                  "h200": {"reserved": 2, "reserved_usd_per_hour": 4.0, "max_new": 1,
                                           "price_usd_per_hour": 5.5},
                                  "l40s": {"owned": 4, "owned_usd_per_hour": 0.7}})
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    (h200,) = [c for c in doc["constraints"] if c["constraint"] == "h200 GPUs"]
    assert h200["used"] < h200["limit"] and not h200["binds"]
    assert doc["cost_usd_per_hour"] - h200["removed_usd_per_hour"] > 1.0  # it costs, though not reached
    md = (tmp_path / "out" / "twin.md").read_text(encoding="utf-8")
    assert ("The h200 GPUs limit does not bind, yet dropping it saves: the plan uses less than it allows, and the "
            "cheaper fleet it rules out runs more of the type than it allows (a pool on it larger than the cap, or "
            "another choice of types within the most GPU types allowed).") in md


def test_a_fleet_forecast_refuses_commitments_above_the_inventory_s_cap(tmp_path):
    """Committed GPUs a cap keeps idle would be paid while the fleet buys others: refused, as a
    scenario's forecast refuses them above its max_gpus (the cap was quietly raised to them)."""
    path = write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 10}},
                       forecast={"quarters": [{"quarter": "2027Q1", "reserved": {"h100-sxm": 50}}]})
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert ("fleet.yaml: forecast.quarters[0]: 50 h100-sxm GPUs are committed but the inventory allows 10 (owned + "
            "reserved + max_new); a commitment is not given back: state this quarter's availability of h100-sxm or "
            "raise its max_new") in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_service_alone_keeps_the_fleet_s_rule_on_gpu_types(tmp_path):
    """At most one GPU type, and 3 new H100s for a fleet that would need 4: the fleet runs L40S only.
    Alone, beta (one H100's load) took an H100 from the cap the others leave, a plan the fleet could
    not run beside alpha's L40S, and its section compared every row with it and blamed commitments
    the fleet does not have. Its re-solves now keep the rule: the others run L40S, so it does too."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import render_fleet, service_section

    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 3}}, max_gpu_types=1)))
    assert [dict(p.solution.gpus_by_type) for p in fp.plans] == [{"l40s": 15}, {"l40s": 6}]
    for i, plan in enumerate(fp.plans):
        assert set(plan.alone.solution.gpus_by_type) == {"l40s"}
        assert not plan.alone_differs
        text = service_section(fp, i)
        assert "within the fleet's rule of at most 1 GPU type (the others run l40s)" in text
        assert "The fleet runs the plan above instead" not in text
    assert "Rule: at most 1 GPU type across the fleet (1 used)." in render_fleet(fp)


def test_committed_gpus_without_a_cap_are_not_called_no_shared_limit(tmp_path):
    """Owned L40S and no cap: the services' plans differ from those they make alone (the sunk GPUs
    are the fleet's), so the constraints section must not say every plan is the one made alone."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import render_fleet

    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, inventory={"l40s": {"owned": 40, "owned_usd_per_hour": 0.5}})))
    assert not fp.constraints and any(p.alone_differs for p in fp.plans)
    text = render_fleet(fp)
    assert "every service's plan is the one it would make alone" not in text
    assert ("The fleet's committed GPUs are paid whether used or not, so a service's plan may differ from the one it "
            "would make alone; its section says where it does.") in text


def _rule_fleet(tmp_path) -> Path:
    """alpha runs L40S only; beta may run H100 (a negotiated price, no cap) or L40S; one GPU type."""
    alpha = service("alpha", 30.0, gpus=["l40s"], kv_dtypes=["bf16"])
    beta = service("beta", 12.0, kv_dtypes=["bf16"])
    return write_fleet(tmp_path, services=[alpha, beta], max_gpu_types=1,
                       inventory={"h100-sxm": {"price_usd_per_hour": 1.2}})


def test_a_service_alone_under_the_type_rule_keeps_the_candidates_the_rule_needs(tmp_path):
    """With no cap or commitment on them, the alone re-solves pruned beta's L40S candidate as beaten
    by a cheaper H100 one, though the rule (alpha runs L40S) left beta only L40S: beta alone had no
    plan, and every sensitivity and sweep row read infeasible. Under the rule every type is told
    apart, as in the fleet's own ILP."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan

    beta = make_fleet_plan(load_fleet(_rule_fleet(tmp_path))).plans[1]
    assert beta.alone is not None and dict(beta.alone.solution.gpus_by_type) == {"l40s": 7}
    assert beta.alone.cost_per_hour == pytest.approx(9.80)
    assert all(math.isfinite(o.cost_per_hour) for o in beta.sensitivity)
    assert all(math.isfinite(o.cost_per_hour) for _, o in beta.ttft_sweep)


def test_an_infeasible_row_under_the_type_rule_names_the_rule(tmp_path):
    """beta's 'without l40s' lever: alone it could run H100 (3 new ones are left it), but the rule of
    one GPU type with alpha on L40S forbids it; the row blamed the inventory caps alone."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import service_section

    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, inventory={"h100-sxm": {"max_new": 3}}, max_gpu_types=1)))
    row = next(line for line in service_section(fp, 1).splitlines() if line.startswith("| without l40s |"))
    assert "the inventory caps (h100-sxm ≤ 3 GPUs) and the fleet's rule of at most 1 GPU type (the other services run l40s) leave no fleet" in row


def test_a_service_s_own_cap_is_not_called_shared(tmp_path):
    """alpha caps its own H100s (max_gpus), the fleet caps nothing and owns L40S: alone alpha would
    buy H100s, and its section said the fleet's "caps are shared", which it has none of."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import service_section

    alpha = service("alpha", 30.0, gpus=[{"id": "h100-sxm", "max_gpus": 64}, "l40s"])
    fp = make_fleet_plan(load_fleet(write_fleet(tmp_path, services=[alpha, service("beta", 12.0)],
                                                inventory={"l40s": {"owned": 40, "owned_usd_per_hour": 0.5}})))
    assert fp.plans[0].alone_caps == {"h100-sxm": 64} and fp.plans[0].alone_differs
    text = service_section(fp, 0)
    assert "The fleet runs the plan above instead: its committed GPUs (l40s) are paid whether used or not, so" in text
    assert "its caps are shared" not in text


def test_the_fleet_totals_name_what_the_services_sections_ask_to_act_on():
    """The fleet's totals said every pool of every service holds, while three services' sections asked
    the operator to route a class by weight or named prompts that miss a target on their own: the
    totals now name those services, and only those (read from the shipped report, which a test keeps
    in step with the code)."""
    text = (Path(__file__).resolve().parent.parent / "reports" / "fleet_2027q1.md").read_text(encoding="utf-8")
    totals, *sections = re.split(r"^## Capacity plan: ", text, flags=re.M)
    asked = {kind: [s.split("\n", 1)[0] for s in sections if mark in s]
             for kind, mark in (("routed", "**Route the "), ("tails", "**Yet requests with "),
                                ("single", " one replica**: a single failure stops"))}
    assert asked["routed"] and asked["tails"] and asked["single"]

    def names(found):
        return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"

    assert (f"**To act on, in the services' sections**: route the classes of {names(asked['routed'])} by weight (each "
            f"runs on several GPU types; its pools table gives the weights); in {names(asked['tails'])}, requests past "
            "a prompt length miss a target on their own where their band holds it (each decision says which); "
            f"{names(asked['single'])} run{'s' if len(asked['single']) == 1 else ''} a pool on one replica, which a "
            "single failure stops (each decision says which; min_replicas_per_pool: 2 buys a spare).") in totals


def test_a_fleet_forecast_warns_of_a_quarter_s_growth_that_reads_as_a_percentage(tmp_path):
    """As a scenario's forecast does: `growth: 25` for +25% plans 26 times the demand (a second reading)."""
    quarters = [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 25}]
    path = write_fleet(tmp_path, services=[service("alpha", 3.0)], forecast={"quarters": quarters})
    r = CliRunner().invoke(main, ["forecast", str(path), "--no-verify", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    said = ("forecast.quarters[1].growth 25 takes demand to 26× the quarter before's: a quarter's growth is a fraction "
            "(0.25 for +25%), where traffic.growth is a multiplier")
    assert f"warning: {path}: {said}" in r.stderr
    [report] = (tmp_path / "out").glob("*_forecast.md")
    assert f"(note: {said})" in report.read_text(encoding="utf-8")


def test_a_fleet_forecast_quarter_whose_plan_did_not_hold_in_simulation_stops_the_forecast(tmp_path, monkeypatch):
    """`planner solve` refuses a fleet a service's plan of which did not hold in simulation (exit 3); the
    fleet forecast priced such a quarter as any other (a reviewer). The verdict is stood in for: a fleet
    certification that misses is minutes of replays."""
    import planner.fleet_forecast

    path = write_fleet(tmp_path, services=[service("alpha", 3.0), service("beta", 2.0)],
                       forecast={"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2"}]})
    monkeypatch.setattr(planner.fleet_forecast, "uncertified_message",
                        lambda plan: "no plan holds its targets in simulation after 2 re-plans; its pool misses"
                        if plan.scenario.name == "beta" else None)
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 3 and len(r.output.strip().splitlines()) == 1, r.output
    assert (f"{path}: forecast quarter 2027Q1: service 'beta': no plan holds its targets in simulation after 2 "
            "re-plans; its pool misses") in r.output
    assert not (tmp_path / "out").exists()


def test_a_fleet_quarter_whose_growth_takes_a_service_below_the_least_rate_names_the_quarter(tmp_path):
    """A quarter's growth just above -1 planned the fleet's later quarters at 0 requests/s and priced
    their tokens at $8.4e7 per million, exit 0 (an outside probe); refused, naming the quarter."""
    path = write_fleet(tmp_path, forecast={"quarters": [{"quarter": "2027Q1"},
                                                        {"quarter": "2027Q2", "growth": -0.9999999999}]})
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out)])
    assert r.exit_code == 2, r.output
    assert not out.exists()
    assert re.fullmatch(r"error: \S+fleet\.yaml: services\[0\]: forecast quarter 2027Q2: traffic\.growth: the peak of 30 requests/s × growth "
                        r"1e-10 is 3e-09 requests/s, below the bound of 1e-06 \(planner\.bounds: a request every 11\.6 "
                        r"days\); check traffic\.peak, traffic\.growth and traffic\.headroom \(in a forecast, the "
                        r"quarters' growth too: forecast\.quarters\[\]\.growth\)\n", r.output), r.output
