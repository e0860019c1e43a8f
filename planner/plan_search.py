"""Solving a scenario's ILP over its evaluations: the ILP's part for one scenario, re-solves
answered once, the lazy search that evaluates only the pairs an optimal plan may need, and the
messages for a scenario with no plan.

The ILP itself is planner.ilp (the only solver code); this module decides what it is asked.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

from planner.capacity import ReplicaModel, capacity_below
from planner.errors import InputError
from planner.evaluator import Evaluator
from planner.ilp import (
    Candidate,
    FleetSolution,
    ServiceModel,
    SplitOption,
    nothing_shared,
    replicas_to_cover,
    solve_fleet,
    undominated_candidates,
)
from planner.plan_objects import (
    Config,
    Evaluation,
    Outcome,
    TrafficClass,
)
from planner.scenario import Scenario
from planner.units import gpu_types_text, gpus_text


def service_model(scn: Scenario, classes, evals: Sequence[Evaluation], *, name: str = "", inventory=None,
                  options=None, rate_scale=1.0, forbid=(), use_reserved=False, bound_types=None) -> ServiceModel:
    """A scenario's part of an ILP: its split options, the candidates an optimal plan may use, its rules.
    inventory: its own caps per GPU type [default: none here (solve_fleet takes them as the shared caps)].
    bound_types: the GPU types a cap or commitment applies to (None: a rule on GPU types applies to
    all); a candidate beaten on another of the other types is dropped too."""
    chosen = options if options is not None else list(classes)
    split_options = [
        SplitOption(key, None if key == "none" else int(key), {tc.name: tc.rate_rps * rate_scale for tc in classes[key]})
        for key in chosen
    ]
    cands = [
        Candidate(evaluation.traffic_class.option, evaluation.traffic_class.name, evaluation.config.label(evaluation.traffic_class.max_model_len),
                  evaluation.config.gpu.id, evaluation.config.tp, evaluation.config.price_usd_per_hour * evaluation.config.tp, evaluation.capacity_rps,
                  evaluation.config.precision_bits)
        for evaluation in undominated_evaluations(evals)
        if evaluation.traffic_class.option in chosen
    ]
    if not use_reserved:
        free = (frozenset() if bound_types is None else
                frozenset(c.gpu for c in cands) - set(bound_types) - set(inventory or ()))
        cands = undominated_candidates(cands, free_types=free, protected=frozenset().union(*forbid))
    return ServiceModel(name, split_options, cands, dict(inventory or {}), scn.min_replicas_per_pool,
                        scn.homogeneous_pools, forbid)


# How a no-plan message names the caps it blames (a fleet's message adds which of them are a service's own).
CAPS_WORDS = "the inventory caps"


def scenario_caps(scn: Scenario) -> dict[str, int]:
    """The scenario's inventory caps per GPU type."""
    return {g.id: g.max_gpus for g in scn.gpu_candidates if g.max_gpus is not None}


def _solve(scn, inventory: dict[str, int], classes, evals: Sequence[Evaluation], *, options=None, rate_scale=1.0,
           forbid=(), keep_lp=False, reserved=None, use_reserved=False, tie_break=True, pool_types=frozenset(),
           max_gpu_types=None, types_in_use=frozenset()):
    # Under a rule on GPU types every type is told apart (fleet_plan._models): a candidate beaten on a
    # type the rule then leaves out may be the one the rule needs.
    bound = None if max_gpu_types is not None else {*inventory, *(reserved or {}), *pool_types}
    sm = service_model(scn, classes, evals, options=options, rate_scale=rate_scale, forbid=forbid,
                       use_reserved=use_reserved, bound_types=bound)
    return solve_fleet(
        sm.options, sm.candidates, inventory=inventory, min_replicas=sm.min_replicas, homogeneous=sm.homogeneous,
        backend=scn.solver.backend, time_limit_s=scn.solver.time_limit_s, forbid=sm.forbid, keep_lp=keep_lp,
        reserved=reserved, use_reserved=use_reserved,
        reserved_pools=scn.forecast.reserved_pools if scn.forecast is not None else True, tie_break=tie_break,
        pool_types=pool_types, max_gpu_types=max_gpu_types, types_in_use=types_in_use,
    )


class Resolver:
    """One plan's re-solves, with identical questions answered once (the sensitivity's x1 is
    the plan itself; 'split forced off' is the split analysis's no-split row). `keep_lp` is no
    part of the question: an answer kept with its LP text is the same answer.

    reserved: committed GPUs, {type: (count, price per GPU-hour)}, that every re-solve is priced
    with unless its question states its own (a scenario's own commitments). pool_types: GPU types on
    which a class may keep a pool of its own (ilp.ServiceModel.pool_types): a fleet service re-solved
    alone keeps the fleet's rule for its committed types, so the fleet's plan stays one it can make.
    type_rule: a fleet's max_gpu_types and the GPU types its other services run, which a service
    re-solved alone may add to only while the fleet stays within the rule."""

    def __init__(self, scn: Scenario, reserved: dict[str, tuple[int, float]] | None = None,
                 pool_types: frozenset[str] = frozenset(), type_rule: tuple[int, frozenset[str]] | None = None):
        self.scn = scn
        self.inventory = scenario_caps(scn)
        self.reserved = dict(reserved or {})
        self.pool_types = frozenset(pool_types)
        self.type_rule = type_rule
        self._answers: dict[tuple, FleetSolution] = {}
        self._keep: list = []  # the keyed objects stay alive, so their ids stay unique

    def __call__(self, classes, evals, **kw) -> FleetSolution:
        if kw.get("reserved") is None and self.reserved:
            kw = {**kw, "reserved": self.reserved}
        if self.pool_types:
            kw = {**kw, "pool_types": self.pool_types}
        if self.type_rule is not None:
            kw = {**kw, "max_gpu_types": self.type_rule[0], "types_in_use": self.type_rule[1]}
        key = (id(classes), id(evals), tuple(kw.get("options") or ()), kw.get("rate_scale", 1.0),
               tuple(kw.get("forbid", ())), tuple(sorted((kw.get("reserved") or {}).items())),
               kw.get("use_reserved", False), kw.get("tie_break", True))
        if key not in self._answers:
            self._keep.append((classes, evals))
            self._answers[key] = _solve(self.scn, self.inventory, classes, evals, **kw)
        return self._answers[key]


# Fewer pairs to evaluate than this: evaluate them all and solve once. Even a few dozen pairs cost
# more searched whole than through the rounds of re-solves: the 128k rollout's context-limit lever
# (23 pairs) took 0.25 s whole and 0.13 s lazily, its fp8 levers (84 pairs) 0.57-1.06 s and 0.26-0.30 s.
LAZY_MIN_PAIRS = 8


def lazy_solve(evaluator: Evaluator, solve: Resolver, classes, configs: Sequence[Config], *, prior=None):
    """solve(classes, every config evaluated for every class) by a LazySearch of its own; returns
    the solution and the evaluations it rests on."""
    search = LazySearch(evaluator, solve, classes, configs, prior=prior)
    return search.solve(), search.evaluations()


class LazySearch:
    """One set of classes and configs asked several questions (the plan, each split option, the
    next-best plans, the peak's sensitivity), each answered as solve(classes, every config evaluated
    for every class, **question) would, searching only the pairs an optimal plan may need.

    A pair not searched stands in the ILP with a proven upper bound on its planned capacity (the
    rate at its memory and batch ceilings, a bound proved earlier, or `prior(config, class)`), so
    the ILP is a relaxation of the full one, whatever the question (its options, excluded plans,
    rate scale, commitments: a higher capacity only loosens a cover row). When its optimum uses only
    searched pairs, that plan is feasible for the full ILP and no plan of the full ILP is better
    (nor, among plans of equal cost, has fewer GPUs or pools): it is the full ILP's optimum.
    Otherwise the pairs it used are searched and it is solved again. Between rounds each class's
    best searched pair sets the rate another pair must reach to cost no more, and one latency point
    (capacity.capacity_below) proves most pairs below it, and the rate it proves them under becomes
    their bound (one of 0 where a target misses with no load: no plan takes them). What one
    question searched, the next starts from.

    Bounds and searched pairs are read with each pair's calibration of the moment (Evaluator.factor_of:
    its own measured ratio where a TTFT sweep carries one, else its class's): certification only
    lowers a class's calibration (simulated below modelled), so a bound stays a bound, and a
    searched pair's evaluation is read again when it changed."""

    def __init__(self, evaluator: Evaluator, solve: Resolver, classes, configs: Sequence[Config], *, prior=None,
                 progress=lambda n: None):
        """progress(n): n more pairs evaluated (searched, or proved below a sibling)."""
        self.evaluator, self._solve, self.classes, self.configs = evaluator, solve, classes, configs
        self.progress = progress
        scn = evaluator.scn
        sizing, quantile, m = scn.sizing.mode, scn.sizing.quantile, scn.min_replicas_per_pool
        self._sizing, self._quantile, self._m = sizing, quantile, m
        # Where the ILP keeps each class's cheapest candidates alone (ilp.cheapest_of_class: no caps,
        # commitments or rule on GPU types, one pool a class), a pair proved below the incumbent's
        # rate stands in at the rate it is proved under (capacity.Below), which prices it out of that
        # model. Elsewhere at the incumbent's rate itself, where it covers the class with as many
        # replicas as the incumbent's cost buys: a round may take it and search it, but the ILP stays
        # integral there, where at a rate just under it every such pair is a fraction of a replica from
        # the incumbent's cost and the solver branches on them all (the catalog-wide fleet's re-solves:
        # 23.3 s of ILPs against 10.9 s; the 128k rollout's full candidate set: 2.28 s in all against
        # 2.76 with its rate). The questions that exclude plans (the next-best ones) keep every
        # candidate, and so does a search on the same evaluator that is not cut, which takes the
        # bounds proved here from Evaluator.upper: a few ILPs, and every bound is a bound.
        self._tight = scn.homogeneous_pools and not solve.pool_types and nothing_shared(
            solve.inventory, solve.reserved, None if solve.type_rule is None else solve.type_rule[0])
        self._answers: dict[tuple, FleetSolution] = {}
        self._calibration = (evaluator.class_calibration(classes), evaluator.simulated_version)
        self.exact: dict[tuple, Evaluation] = {}
        self._standing: dict[tuple, Evaluation] = {}  # evaluations() of the bounded pairs, kept while their bound holds still
        self.bound: dict[tuple, tuple[float, Config, TrafficClass, ReplicaModel, float]] = {}
        self._order = [evaluator.pair_key(cfg, tc) for tcs in classes.values() for tc in tcs for cfg in configs]
        self._class_pairs = {evaluator._class_key(tc): [evaluator.pair_key(cfg, tc) for cfg in configs]
                             for tcs in classes.values() for tc in tcs}
        # A pair evaluate_all proved below a sibling among these configs is not fresh: evaluate_all
        # proves it so again from the sibling's capacity, at no new latency point.
        order = set(self._order)
        fresh = sum(1 for key in self._order
                    if key not in evaluator._cache and evaluator.dominated.get(key) not in order)
        if fresh < LAZY_MIN_PAIRS:  # searching them all costs less than the rounds of re-solves
            for e in evaluator.evaluate_all(classes, configs):
                self.exact[evaluator.pair_key(e.config, e.traffic_class)] = e
            self.by_label = {}
            progress(len(self._order))
            return
        exact, bound = self.exact, self.bound
        for tcs in classes.values():
            for tc in tcs:
                for cfg in configs:
                    cal = evaluator.factor_of(cfg, tc)
                    key = evaluator.pair_key(cfg, tc)
                    if evaluator.knows(key):
                        exact[key] = evaluator.evaluate(cfg, tc)
                        continue
                    try:
                        rm = evaluator.replica_model(key, evaluator.deployment(cfg, tc.max_model_len), tc)
                    except InputError:
                        exact[key] = evaluator.evaluate(cfg, tc)
                        continue
                    upper = rm.rate(rm.batch_bound(sizing, quantile))
                    upper = min(upper, evaluator.upper.get(key, math.inf), prior(cfg, tc) if prior else math.inf)
                    if upper <= 0:
                        exact[key] = evaluator.evaluate(cfg, tc)
                    else:
                        bound[key] = (upper * cal, cfg, tc, rm, cal)
        self.by_label = {(tc.option, tc.name, cfg.label(tc.max_model_len)): key for key, (_, cfg, tc, _, _) in bound.items()}
        progress(len(exact))
        # Seed each class with a searched pair of positive capacity (the first its bound prices
        # cheapest), so that the first round's bounds are already tightened against it. A pair
        # whose TTFT target misses with no load (capacity 0: capacity.target_floors) is passed over
        # unsearched; without an incumbent a class's pairs are tried by the ILP one round each (the
        # 128k rollout's re-solve on its H200s and L40S alone took 7 ILPs, its TTFT targets x1.5 took
        # 5: one each now).
        for tcs in classes.values():
            for tc in tcs:
                keys = self._class_pairs[evaluator._class_key(tc)]
                if any(key in exact and exact[key].capacity_rps > 0 for key in keys):
                    continue
                mine = []
                for key in keys:
                    if key in bound:
                        u, cfg = bound[key][:2]
                        mine.append((cfg.price_usd_per_hour * cfg.tp * replicas_to_cover(tc.rate_rps, u, m),
                                     cfg.label(0), key))
                for *_, key in sorted(mine):
                    if bound[key][3].floors():
                        bound[key] = (0.0, *bound[key][1:])
                        continue
                    self._search([key])
                    if exact[key].capacity_rps > 0:
                        break
        self._tighten()

    def _search(self, keys) -> None:
        pairs = [self.bound.pop(key)[1:3] for key in keys]
        for key, evaluation in zip(keys, self.evaluator.evaluate_pairs(pairs), strict=True):
            self.exact[key] = evaluation
        self.progress(len(keys))

    def _tighten(self) -> None:
        """For each class, the cheapest searched pair alone (replicas to cover its rate, at least m)
        sets the rate another pair must reach to cost no more. The other pairs are taken the most
        promising first (the least cost at their bound): a pair proved below that rate by one latency
        point takes the rate it is proved under as its bound; the first not proved below is searched,
        and the rate is set again from what it finds. A bound at or below that rate already proves
        its pair dearer (it needs more replicas than the incumbent's cost buys): the incumbent only
        gets cheaper, so the rate only rises, and such a pair is not asked again.

        Where bounds stand under the rate (self._tight), the first pair not proved below is searched
        before the others are tried, which spares the points a better incumbent makes needless: with
        every pair tried before each search, a poor first incumbent (the TTFT sweep's x0.5 on the
        128k rollout's full candidate set, seeded by the stated targets' capacities) had 1,281 pairs
        tried where 127 are now, and 2,167 latency points in all where 552. Elsewhere every pair is
        tried first, and the most promising of those not proved below is searched: there the pairs
        proved below stand in at the rate itself, where a round may take them, and the catalog-wide
        fleet took 266 ILPs (12.1 s of them) searching first against 230 (7.9 s) trying first."""
        exact, bound, m, ev = self.exact, self.bound, self._m, self.evaluator
        for tcs in self.classes.values():
            for tc in tcs:
                keys = self._class_pairs[ev._class_key(tc)]
                while True:
                    costs = [e.config.price_usd_per_hour * e.config.tp * replicas_to_cover(tc.rate_rps, e.capacity_rps, m)
                             for e in (exact[k] for k in keys if k in exact) if e.capacity_rps > 0]
                    if not costs:
                        break
                    best = min(costs)
                    window = []
                    for key in keys:
                        if key not in bound:
                            continue
                        u, cfg = bound[key][:2]
                        if u <= 0:
                            continue  # no plan uses it (the ILP takes no candidate of capacity 0)
                        price = cfg.price_usd_per_hour * cfg.tp
                        least = price * replicas_to_cover(tc.rate_rps, u, m)  # its cost at its bound
                        most = math.floor(best / price + 1e-9)  # replicas affordable at the incumbent's cost
                        if most < m or least > best:
                            continue  # its bound already prices it out
                        need = tc.rate_rps / most
                        if u > need:  # (at or below it, proved below it already)
                            window.append((least, cfg.label(0), key, need))
                    unproved = None
                    for _, _, key, need in sorted(window):
                        u, cfg, other, rm, cal = bound[key]
                        below = capacity_below(rm, need / cal, sizing=self._sizing, quantile=self._quantile)
                        if not below.below:
                            unproved = unproved or key
                            if self._tight:
                                break
                            continue
                        upper = below.upper_rps if self._tight or below.upper_rps <= 0 else need / cal
                        if upper > 0:  # (0, a target missed unloaded: proved again at once, where a bound
                            # of 0 in the evaluator would have the next search evaluate the pair)
                            ev.upper[key] = min(ev.upper.get(key, math.inf), upper)
                        bound[key] = (upper * cal, cfg, other, rm, cal)
                    if unproved is None:
                        break
                    self._search([unproved])

    def _recalibrate(self) -> None:
        """Read the searched pairs and the bounds again where certification changed a calibration."""
        # a simulated capacity recorded without a ratio (a challenger's, a log's) changes no calibration
        now = (self.evaluator.class_calibration(self.classes), self.evaluator.simulated_version)
        if now == self._calibration:
            return
        self._calibration, self._answers = now, {}
        ev = self.evaluator
        for key, e in self.exact.items():  # a variant proved below a sibling stays below it (the class scales)
            self.exact[key] = e if e.dominated_by else ev.evaluate(e.config, e.traffic_class)
        for key, (u, cfg, tc, rm, cal) in self.bound.items():
            new = ev.factor_of(cfg, tc)
            self.bound[key] = (u / cal * new, cfg, tc, rm, new)

    def evaluations(self) -> list[Evaluation]:
        """Every pair's evaluation, class by class: the searched ones', and for the others their
        bounds (Evaluation.optimistic_rps)."""
        out, standing = [], self._standing
        for key in self._order:
            found = self.exact.get(key)
            if found is None:
                u, cfg, tc, _, _ = self.bound[key]
                found = standing.get(key)
                # Every round asks for thousands of these, most unchanged since the last: built anew, they
                # cost a tenth of a second a run on the full candidate set.
                if found is None or found.optimistic_rps != u:
                    found = standing[key] = Evaluation(cfg, tc, None, optimistic_rps=u)
            out.append(found)
        return out

    def solve(self, **question) -> FleetSolution:
        """solve(classes, every pair's evaluation, **question): options, forbid, rate_scale, reserved,
        use_reserved (keep_lp: the LP text is the last round's, where bounds stand in)."""
        self._recalibrate()
        if question.get("forbid"):
            question["forbid"] = self._as_the_ilp_sees(question["forbid"])
        key = tuple(sorted((k, repr(v)) for k, v in question.items()))
        if key in self._answers:
            return self._answers[key]
        classes, bound, by_label = self.classes, self.bound, self.by_label
        while True:
            evals = self.evaluations()
            # Rounds that search more pairs need only the cheapest cost; the tie-break runs at the end,
            # on the same model, once the cost optimum uses only searched pairs.
            sol = self._solve(classes, evals, **question,
                              tie_break=lambda joint: not _bounded(joint.services[0], by_label, bound))
            if not sol.pools and bound:  # the relaxation has no plan, so none has: search all for the message
                self._search(list(bound))
                continue
            used = _bounded(sol, by_label, bound)
            if not used:
                precise, found = prefer_precise(sol, self.evaluator, classes, self.configs, self._m)
                was_bound = sum(self.bound.pop(pair, None) is not None for pair in found)
                self.exact.update(found)
                self.progress(was_bound)
                self._answers[key] = precise
                return precise
            self._search(_with_rivals(sol, used, by_label, bound, self._m))
            self._tighten()

    def _as_the_ilp_sees(self, forbid):
        """Each plan to exclude, and the same plan named by the configs the ILP sees in its pools'
        places: a pool runs the precise twin of the dtype variant the ILP chose (prefer_precise), and
        the ILP holds only the variant of highest capacity on those GPUs (undominated_evaluations)."""
        seen = {}
        for e in undominated_evaluations(self.evaluations()):
            tc, cfg = e.traffic_class, e.config
            seen[(tc.option, tc.name, *cfg.same_gpus)] = cfg.label(tc.max_model_len)
        group = {(tc.option, tc.name, cfg.label(tc.max_model_len)): (tc.option, tc.name, *cfg.same_gpus)
                 for tcs in self.classes.values() for tc in tcs for cfg in self.configs}
        out = []
        for plan in forbid:
            out.append(plan)
            out.append(frozenset((o, k, seen.get(group.get((o, k, c)), c)) for o, k, c in plan))
        return tuple(dict.fromkeys(out))


def prefer_precise(sol: FleetSolution, evaluator: Evaluator, classes, configs: Sequence[Config], min_replicas: int
                   ) -> tuple[FleetSolution, dict[tuple, Evaluation]]:
    """The solution with each pool on the most precise dtype variant of its GPUs that covers the
    pool's rate with the same replicas; and the evaluations that searched (by pair key).

    Dtype variants on the same GPUs (GPU type, price, tp) cost the same, so the ILP sees only the
    one of highest capacity (undominated_evaluations) and the evaluator does not search one proved
    below it. A more precise variant that needs no more replicas is then an exact tie the ILP cannot
    see, and a tie is no reason to quantise (ilp.canonical_ties' rule): weights first, then the KV
    cache. The pool keeps its GPUs, replicas and cost, so caps, commitments and the objective are
    untouched; a class served by several pools is left as solved, as canonical_ties leaves it."""
    if not sol.pools:
        return sol, {}
    per_class = Counter(p.traffic_class for p in sol.pools)
    by_name = {tc.name: tc for tc in classes.get(sol.option, [])}
    found: dict[tuple, Evaluation] = {}
    pools = []
    for pool in sol.pools:
        tc = by_name.get(pool.traffic_class)
        cfg = None if tc is None else next((c for c in configs if c.label(tc.max_model_len) == pool.config), None)
        if cfg is None or per_class[pool.traffic_class] > 1:
            pools.append(pool)
            continue
        precise = sorted((c for c in configs if c.same_gpus == cfg.same_gpus and c.precision_bits > cfg.precision_bits),
                         key=lambda c: (tuple(-b for b in c.precision_bits), c.label(0)))
        for c in precise:
            if _below(evaluator, c, tc, pool.rate_rps / pool.replicas):
                continue
            evaluation = evaluator.evaluate(c, tc)
            found[evaluator.pair_key(c, tc)] = evaluation
            rps = evaluation.capacity_rps
            if rps > 0 and replicas_to_cover(pool.rate_rps, rps, min_replicas) <= pool.replicas:
                pool = dataclasses.replace(pool, config=c.label(tc.max_model_len), capacity_rps=rps)
                break
        pools.append(pool)
    return dataclasses.replace(sol, pools=tuple(pools)), found


def _below(evaluator: Evaluator, cfg: Config, tc: TrafficClass, rps: float) -> bool:
    """Whether one latency point proves the pair's planned capacity below `rps` (capacity_below, at
    the class's calibration), so that it needs no search."""
    key = evaluator.pair_key(cfg, tc)
    if evaluator.knows(key):
        return False
    try:
        rm = evaluator.replica_model(key, evaluator.deployment(cfg, tc.max_model_len), tc)
    except InputError:
        return False
    cal = evaluator.factor_of(cfg, tc)
    scn = evaluator.scn
    return capacity_below(rm, rps / cal, sizing=scn.sizing.mode, quantile=scn.sizing.quantile).below


def _bounded(sol: FleetSolution, by_label, bound) -> list[tuple]:
    """The pairs of the solution that stand in with a bound (not searched yet)."""
    keys = [by_label.get((sol.option, p.traffic_class, p.config)) for p in sol.pools]
    return [key for key in keys if key in bound]


def _with_rivals(sol: FleetSolution, used: list[tuple], by_label, bound, m: int) -> list[tuple]:
    """The bounded pairs a round's plan uses, and their rivals: the other bounded pairs of a used
    pair's class name (under any split option) on the same GPU type whose bound prices them at no
    more than that pool costs in the plan. Searching a used pair most often shows it dearer than
    its bound, and the next round's plan then takes such a rival in its place (a dtype or tp
    variant on the capped type; the same config under the next split option), one ILP a pair.
    Which pairs are searched never changes the answer (lazy_solve), only how many rounds it takes:
    the 128k rollout's TTFT sweep at x0.5 took 17 rounds one pair at a time."""
    cost = {by_label.get((sol.option, p.traffic_class, p.config)): p.cost_per_hour for p in sol.pools}
    out = list(used)
    for key in used:
        _, cfg, tc, _, _ = bound[key]
        for other, (u, c, t, _, _) in bound.items():
            if other in out or t.name != tc.name or c.gpu.id != cfg.gpu.id or u <= 0:
                continue
            price = c.price_usd_per_hour * c.tp
            if price * replicas_to_cover(t.rate_rps, u, m) <= cost[key] + 1e-9:
                out.append(other)
    return out


def undominated_evaluations(evals: Sequence[Evaluation]) -> list[Evaluation]:
    """Per class, per (GPU type, price, tp): only the config of highest capacity.

    Dtype variants on the same GPUs cost the same and use the same GPUs, so a lower-
    capacity one can never be needed in an optimal plan (inventory caps count GPUs,
    which are equal too). Ties keep the first label in sort order: deterministic.
    """
    best: dict[tuple, Evaluation] = {}
    for evaluation in sorted(evals, key=lambda e: e.config.label(e.traffic_class.max_model_len)):
        if evaluation.capacity_rps <= 0:
            continue
        key = (evaluation.traffic_class.option, evaluation.traffic_class.name, *evaluation.config.same_gpus)
        if key not in best or evaluation.capacity_rps > best[key].capacity_rps:
            best[key] = evaluation
    return list(best.values())


def infeasible_message(classes, evals: Sequence[Evaluation], inventory: dict, *, rate_scale: float = 1.0,
                       min_replicas: int = 1, type_rule: tuple[int, frozenset[str]] | None = None,
                       homogeneous: bool = False) -> str:
    """Why no plan covers `classes` (every split option of a scenario, or the ones a re-solve asked)
    with these evaluations under these caps; rate_scale: the classes' rates were asked scaled (the
    peak's sensitivity); min_replicas: the scenario's min_replicas_per_pool, which the caps may not
    leave room for whatever the load; type_rule: a fleet's rule on GPU types, with the types its
    other services run (Resolver.type_rule), which then shares the blame. A split option's class that
    no config serves is named only where the no-split class is not asked or not served either: where
    it is, what stops the plan is below (the caps, min_replicas, a fleet's rule), not the split.
    homogeneous: the scenario's homogeneous_pools, which, where the caps of several types together
    would carry a class, is named beside them (an outside probe: "the caps leave no fleet" read as a
    reason to buy GPUs, where 2 H100s and 2 L40S in one pool covered the load)."""

    def served(tc) -> bool:
        return any(evaluation.capacity_rps > 0 for evaluation in evals if evaluation.traffic_class is tc)

    unsplit_served = bool(classes.get("none")) and all(served(tc) for tc in classes["none"])
    # Where the no-split class is named, whether the split options asked beside it failed too (they did:
    # no plan covers any option asked), so that a reader does not take a split for the way out. (Past the
    # first loop the classes named are the no-split ones wherever there are any: `asked`.)
    splits_too = " (every split option fails too)" if classes.get("none") and len(classes) > 1 else ""
    for key in ["none", *[k for k in classes if k != "none" and not unsplit_served]]:
        for tc in classes.get(key, []):
            if served(tc):
                continue
            mine = [evaluation for evaluation in evals if evaluation.traffic_class is tc]
            best = _best_failed(mine)
            where = "without a split" if key == "none" else f"under split {int(key):,}"
            if best is None:
                return f"class '{tc.label}' {where}: no candidate config (check gpus, tp, dtypes)"
            return (
                f"class '{tc.label}' {where} cannot be served by any of {len(mine)} configs; the best candidate, "
                f"{best.config.label(tc.max_model_len)}, is stopped by {best.problem}"
                + (splits_too if key == "none" else "")
            )
    # The no-split class where it was asked, else the classes of the options asked.
    asked = classes.get("none") or [tc for tcs in classes.values() for tc in tcs]
    rates = ", ".join(f"'{tc.label}' {tc.rate_rps * rate_scale:,.4g} req/s" for tc in asked)
    rule = ""
    if type_rule is not None:
        limit, others = type_rule
        rule = (f"the fleet's rule of at most {gpu_types_text(limit)} (the other services run "
                f"{', '.join(sorted(others)) or 'none'})")
    if not inventory:
        if rule:
            return f"{rule} leaves no fleet that covers every class at once ({rates})"
        return (f"the solver found no fleet that covers the peak ({rates}), though each class has configs "
                "that serve it; check the traffic rates and solver.time_limit_s")
    # Only the caps of GPU types that could serve some class play a part; the others would mislead.
    serving = {evaluation.config.gpu.id for evaluation in evals if evaluation.capacity_rps > 0}
    caps = ", ".join(f"{g} ≤ {gpus_text(n)}" for g, n in sorted(inventory.items()) if g in serving) or "none that serve"
    if min_replicas > 1:
        for tc in asked:
            # the most replicas of one config that serves the class the caps allow (None: an uncapped type)
            room = [None if evaluation.config.gpu.id not in inventory else inventory[evaluation.config.gpu.id] // evaluation.config.tp
                    for evaluation in evals if evaluation.traffic_class is tc and evaluation.capacity_rps > 0]
            if room and None not in room and max(room) < min_replicas:
                return (f"class '{tc.label}': min_replicas_per_pool {min_replicas} asks for {min_replicas} replicas in "
                        f"a pool, but {CAPS_WORDS} ({caps}) allow at most {max(room)} of any config that serves "
                        f"it; lower min_replicas_per_pool or raise the caps{splits_too}")
    for tc in asked:
        # the most this class gets from every capped GPU type at once (None: some type is uncapped)
        most: dict[str, float] = {}
        narrowest: dict[str, int] = {}  # each capped type's least tp among the configs that serve the class
        for evaluation in (evaluation for evaluation in evals if evaluation.traffic_class is tc and evaluation.capacity_rps > 0):
            gpu, tp = evaluation.config.gpu.id, evaluation.config.tp
            cap = inventory.get(gpu)
            if cap is None:
                break
            most[gpu] = max(most.get(gpu, 0.0), cap // tp * evaluation.capacity_rps)
            narrowest[gpu] = min(narrowest.get(gpu, tp), tp)
        else:
            if sum(most.values()) < tc.rate_rps * rate_scale:
                # where no replica fits at all, a cap of some GPUs below one replica's is the reason, not the load
                too_wide = sorted((g, tp) for g, tp in narrowest.items() if 0 < inventory[g] < tp)
                # a narrower tp is worth trying only where none within the cap was offered (a 70B model on one
                # GPU was told to lower tp 2 where tp 1 was offered and cannot hold it)
                tried = {g for g, _ in too_wide if any(e.traffic_class is tc and e.config.gpu.id == g
                                                        and e.config.tp <= inventory[g] for e in evals)}
                reason = ("; one replica takes more GPUs than its type's cap: " + ", ".join(
                    f"{g} tp {tp} > {gpus_text(inventory[g])} ("
                    + ("raise the cap: no narrower tp offered serves the class" if g in tried else "lower tp or raise the cap")
                    + ")" for g, tp in too_wide)) if too_wide and not any(most.values()) else ""
                return (f"class '{tc.label}' needs {tc.rate_rps * rate_scale:,.4g} req/s but {CAPS_WORDS} ({caps}) "
                        f"allow at most {sum(most.values()):,.4g} req/s{reason}{splits_too}")
    mixed = ""
    if homogeneous and len([g for g in inventory if g in serving]) > 1:
        mixed = ("; a pool runs one config (homogeneous_pools: true): homogeneous_pools: false lets a class's pool mix "
                 "the capped GPU types")
    return (f"{CAPS_WORDS} ({caps}){f' and {rule}' if rule else ''} leave no fleet that covers every class at once "
            f"({rates}){mixed}")


def no_plan_message(sol: FleetSolution, scn: Scenario, classes, evals, inventory) -> str:
    """Why the solver returned no plan, by its status (PuLP: Infeasible, Not Solved, Undefined, Unbounded)."""
    if sol.problem:  # decided before the solver ran (a fleet larger than any that exists)
        return sol.problem
    if sol.status == "Infeasible":
        return infeasible_message(classes, evals, inventory, min_replicas=scn.min_replicas_per_pool,
                                  homogeneous=scn.homogeneous_pools)
    if sol.status == "Not Solved":
        return (f"no plan found within the solver's time limit of {scn.solver.time_limit_s:g} s; "
                "raise solver.time_limit_s or offer fewer candidates")
    return f"the solver ended with status '{sol.status}' and no plan"


def _best_failed(evals: Sequence[Evaluation]) -> Evaluation | None:
    """The candidate closest to serving the class: weights fit, then the least shortfall of a target
    no load meets (its floor over the target: the fastest prefill, or the fastest steps)."""
    if not evals:
        return None
    with_cap = [evaluation for evaluation in evals if evaluation.capacity is not None]
    if not with_cap:
        return evals[0]
    return min(with_cap, key=lambda evaluation: (max((f.shortfall for f in evaluation.capacity.floors), default=0.0),
                                                 -evaluation.config.tp, evaluation.config.label(0)))


def _summary(sol: FleetSolution) -> str:
    pools = "; ".join(f"{p.traffic_class}: {p.replicas:,} x {p.config}" for p in sol.pools)
    return f"{sol.split_text} — {pools}"


# Why a re-solve the solver's time limit stopped has no row: not the caps or targets infeasible_message would blame.
TIME_LIMIT_WHY = "no plan found within solver.time_limit_s; raise it"


def outcome_of(name: str, sol: FleetSolution, why: str = "", *, narrows: bool = False) -> Outcome:
    """A re-solve's row: its plan, or why it has none (`why`, unless the time limit stopped the solver).
    narrows: the re-solve only takes options away from the scenario as stated (Outcome.narrows)."""
    if not sol.pools:
        if sol.status == "Not Solved":
            why = TIME_LIMIT_WHY
        return Outcome(name, False, math.inf, 0, "", why or f"infeasible ({sol.status})", narrows=narrows)
    return Outcome(name, True, sol.cost_per_hour, sol.gpus, _summary(sol), solution=sol, narrows=narrows)

