"""What both ILPs (planner.ilp, planner.day_mix_ilp) share of the solver library: the backend's
solver object, names safe in an .lp file, the .lp text, and the second solve that breaks ties
at the optimum's cost.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from functools import lru_cache

from planner.errors import InputError
from planner.pulp_import import pulp

COST_TOLERANCE_USD = 1e-6  # plans within this of the optimum's cost per hour count as equal
FIX_FROM_INTEGER_VARIABLES = 1000  # break_ties fixes variables by reduced costs from this size of problem
# Below this many columns HiGHS runs without its feasibility-jump heuristic. Such a model (every
# single-service ILP of the shipped scenarios and of the catalog-wide fleet's explorations) is
# solved at its root, where the heuristic finds nothing the root does not and costs a fixed 2-4 ms
# a run, a quarter to four fifths of it: measured on 26 of them (17-268 columns), 25 faster without
# it and one 2 ms slower, all at the same optimum. The joint fleet ILPs branch, and there it pays: the
# catalog-wide fleet's (1,244 columns) 2.16 s with it, 2.33 s without; the shipped fleet's (292)
# within noise either way.
FEASIBILITY_JUMP_FROM_COLUMNS = 250
# HiGHS's two sub-MIP heuristics, RINS and RENS, are off: each solves a smaller MIP around the LP
# optimum for an incumbent, and on the planner's ILPs (cover rows over integer replicas, solved to
# a zero gap) the root's rounding and the branching find that incumbent themselves, while the
# sub-MIPs nest (eight deep in the catalog-wide fleet's joint ILP) and took up to half a solve's time.
# Measured on 328 ILPs, each written out as its run solved it and solved alone by highspy 1.16 on one
# thread: every ILP of 128k_rollout, finance_2027, inventory_mixed and 70b_enterprise solved without
# simulation (243), and those of 250 columns or more of fleet_2027q1's forecast (50), of
# fleet_2027q1 solved with and without simulation (20) and of bench/solve.py's catalog-wide fleet
# (15): 56.3 s with them, 34.4 s without; the forecast's 33.8 and 19.0 s, the catalog-wide
# fleet's 6.0 and 5.1 s, the four scenarios' 4.4 and 3.7 s; none more than 0.07 s slower,
# every optimum the same (among plans tied on every term the solver may return another one: the
# reports' rows that moved are such twins). With every heuristic off (mip_heuristic_effort 0) they
# took longer than with all on.
HIGHS_SUB_MIP_HEURISTICS = ("mip_heuristic_run_rins", "mip_heuristic_run_rens")
# HiGHS runs in process (CBC is a subprocess reading an MPS file). Measured by bench/solve.py on the
# shipped fleet with every service offered the full catalog, without simulation: 101 s end to end
# against CBC's 430 s (medians of 3 fresh processes, a loaded 2-core machine), the ILPs being most
# of it. Both find the same optima (tests/test_fleet.py, tests/test_ilp.py run both).
DEFAULT_BACKEND = "highs"


@lru_cache(maxsize=1 << 17, typed=True)
def lp_name(*parts: object) -> str:
    """A variable's or constraint's name built from its indices, LP-file-safe (the same indices
    recur in every re-solve of a plan: the catalog-wide fleet's re-solves ask for 80,000). A name
    may not begin with a digit in the LP format (a fleet's `128k_rollout_cover_...` read as 128 times
    a term: neither HiGHS nor CBC could read the shipped fleet's file): such a name begins with '_',
    which sorts, as the digit did, before every lower-case letter, and so before every name the
    planner makes of lower-case words (PuLP hands the solver its columns in the order of their names)."""
    name = "".join(ch if ch.isalnum() else "_" for ch in "_".join(str(p) for p in parts))
    return "_" + name if name[:1].isdigit() else name


def lp_name_clash(names: Sequence[str]) -> tuple[int, int] | None:
    """The first two of `names` (by index: the earlier, the later) that lp_name makes one, or None:
    rows named from them would be one row (PuLP refuses a model so named, with a traceback)."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        j = first.setdefault(lp_name(name), i)
        if j != i:
            return j, i
    return None


def solve_within(prob: pulp.LpProblem, solver, time_limit_s: float) -> int:
    """Solve `prob`; PuLP's status, but Not Solved where CBC says "Integer infeasible" after the whole time
    limit. Stopped by its limit before it finds a solution, CBC says so (measured: inventory_mixed.yaml
    with time_limit_s 0.001, which 0.005 s solves; coin-or/python-mip#17 saw CBC do the same), and the
    planner would then blame the caps or the targets for what more time solves. PuLP reads that line as
    Infeasible with no solution status of infeasibility; a proof ("Infeasible", HiGHS's status) carries
    one, and stands however long it took, as does CBC's integer infeasibility proved within the limit."""
    t0 = time.perf_counter()
    prob.solve(solver)
    if (prob.status == pulp.LpStatusInfeasible and prob.sol_status != pulp.LpSolutionInfeasible
            and time.perf_counter() - t0 >= time_limit_s):
        return pulp.LpStatusNotSolved
    return prob.status


def solution_status(prob: pulp.LpProblem) -> str:
    """A solved problem's status for people: a solver stopped by its time limit with a plan in hand
    reports "Optimal" with an integer-feasible solution (CBC), which is not proven optimal."""
    return "Optimal" if prob.sol_status == pulp.LpSolutionOptimal else "Feasible (time limit, not proven optimal)"


def break_ties(prob: pulp.LpProblem, cost, ties, solver, *, keep_twin: bool = False) -> None:
    """The second of two solves: at the first's cost (within COST_TOLERANCE_USD), minimise `ties`.
    When that solve does not end optimal (the time limit), the cost-optimal solution stands; with
    keep_twin (for a `ties` of integer variables and coefficients), also where it is proven optimal
    and as good on `ties` as what that solve found (_twin).

    On a problem of FIX_FROM_INTEGER_VARIABLES or more, reduced-cost fixing (fix_by_reduced_costs)
    first bounds the integer variables that no plan at the optimum's cost can raise: the same
    plans stay feasible, and the solver has fewer to branch on; the bounds are undone after.
    Measured (CPU-s of this call): the catalog-wide fleet of bench/solve.py, 1,200 integer
    variables, 4.0 without and 2.0 with; the shipped fleet's joint ILP, 289, 1.3 and 1.5; the
    shipped scenarios' ILPs, under 150, milliseconds either way. Below the threshold it is left
    out: it saves nothing there, and other bounds take the solver down another path, which among
    plans tied on every term of `ties` (the same GPUs of other types, both inside their
    commitments) can end at another of them, and another plan in a report.

    No MIP start, though the first's optimum is feasible here and would make this solve four times
    faster on the catalog-wide fleet: HiGHS 1.16 given that start (setSolution) returned it as
    optimal where a plan with one pool fewer existed (finance_2027's "fp8 KV cache off" lever,
    tests/test_ilp.py::test_ties_are_exact_where_a_solver_start_broke_them); with presolve off, or
    without the start, it finds that plan."""
    first = {v.name: v.varValue for v in prob.variables()}
    proven = prob.sol_status == pulp.LpSolutionOptimal  # read before the relaxation's solve replaces it
    optimum = pulp.value(cost)
    large = sum(v.cat == pulp.LpInteger for v in prob.variables()) >= FIX_FROM_INTEGER_VARIABLES
    undo = fix_by_reduced_costs(prob, cost, optimum + COST_TOLERANCE_USD, _relaxation_of(solver)) if large else []
    prob.assignVarsVals(first)
    first_ties = _rounded_value(ties) if keep_twin and proven else None
    prob += cost <= optimum + COST_TOLERANCE_USD, "cost_at_optimum"
    prob.setObjective(ties)
    prob.solve(solver)
    for var, bound in undo:
        var.upBound = bound
    if prob.status != pulp.LpStatusOptimal or (first_ties is not None and _twin(first_ties, optimum, cost, ties)):
        prob.assignVarsVals(first)


def _twin(first_ties: float, first_cost: float, cost, ties) -> bool:
    """Whether the cost optimum (its cost and `ties` given) is as good on both as the tie-break solve's
    plan, whose values the variables hold: with keep_twin it then stands (break_ties). Among plans
    tied on cost and on every term of `ties` the solver's pick is arbitrary, and where the caller has
    already acted on the first solve's, that one is the pick to keep: a fleet's explorations start
    from it while the second solve runs (fleet_plan._EarlySweeps), and are dropped and run again
    where the plan kept divides the GPU types otherwise between the services. Elsewhere the second
    solve's pick stands as before, since a plan that certification replays and re-plans can end
    elsewhere from a twin (finance_2027's forecast did: 2027Q4 certified at $60.10/hour from one,
    $59.91 from the other). On the catalog-wide fleet of bench/solve.py, with
    HIGHS_SUB_MIP_HEURISTICS off, the second solve's pick, another division of the same GPUs at the
    same cost, dropped 4 of its 8 services' sweeps, and the fleet took 15.91 s against 15.33 s before
    (medians of 3 alternating fresh runs); keeping the first, none, and 13.18 s against 14.53 s (of 8).

    Only for a proven optimum (break_ties): one a time limit stopped may cost more than the second
    solve's plan, which that solve may take up to it. The fleet's `ties` sum integer variables with
    integer coefficients (planner.ilp), read at the values rounded as the plan is read back, so a
    better plan is at least 1 below: half of that tells them apart at any size of fleet, where a
    relative tolerance would not."""
    return first_cost <= pulp.value(cost) + COST_TOLERANCE_USD and first_ties < _rounded_value(ties) + 0.5


def _rounded_value(expr) -> float:
    """expr at its variables' values rounded to integers, as planner.ilp reads a plan back."""
    return expr.constant + sum(coefficient * round(var.varValue or 0.0) for var, coefficient in expr.items())


def fix_by_reduced_costs(prob: pulp.LpProblem, cost, most: float, relaxation) -> list[tuple]:
    """Lower the upper bounds of prob's integer variables (those with lower bound 0) to what a
    solution costing at most `most` can take, from the reduced costs of prob's linear relaxation
    minimising `cost` (prob's objective); returns (variable, its former upper bound) pairs to undo.

    Reduced-cost fixing (Nemhauser and Wolsey, Integer and Combinatorial Optimization, 1988,
    II.2.2): with the relaxation's optimum L and its reduced costs d, every solution x of the
    relaxation, so every integer solution, has cost(x) >= L + sum_j d_j (x_j - x*_j), each term
    non-negative (d_j > 0 where x*_j sits at its lower bound, d_j < 0 at its upper bound). A
    variable with lower bound 0 and d_j > 0 thus takes x_j <= (most - L) / d_j in a solution that
    costs at most `most`, rounded down when x_j is integer. The slack gets a margin of 1e-4 of the
    cost (solvers' reduced costs and rows carry their tolerances, about 1e-7): a smaller bound
    could cut a plan, a larger one only fixes less. Nothing is fixed when the relaxation does not
    end optimal."""
    prob.solve(relaxation)
    if prob.status != pulp.LpStatusOptimal or prob.sol_status != pulp.LpSolutionOptimal:
        return []
    slack = most - pulp.value(cost) + 1e-4 * max(1.0, abs(most))
    undo = []
    for var in prob.variables():
        if var.cat != pulp.LpInteger or var.lowBound != 0 or not var.dj or var.dj <= 0:
            continue
        bound = math.floor(slack / var.dj)
        if var.upBound is None or bound < var.upBound:
            undo.append((var, var.upBound))
            var.upBound = bound
    return undo


def _relaxation_of(solver):
    """The same solver object (backend, options) for the linear relaxation (integrality ignored)."""
    relaxation = copy.copy(solver)
    relaxation.mip = False
    return relaxation


_HIGHS_BANNER_SILENCED = False
_BANNER_LOCK = threading.Lock()


@contextmanager
def _quiet_stdout():
    """Send file descriptor 1 to /dev/null for a moment (C code that prints, not Python)."""
    try:
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # no usable stdout: nothing to silence
        yield
        return
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


if hasattr(pulp, "HiGHS") and pulp.HiGHS().available():
    class _QuietHiGHS(pulp.HiGHS):
        """PuLP's HiGHS interface. HiGHS prints its banner on stdout when a process builds its first
        solver object, before any option can turn output off, which would break `--json` output:
        that first object is built with stdout silenced."""

        def createAndConfigureSolver(self, lp):
            global _HIGHS_BANNER_SILENCED
            # Locked: two threads (worker_pool.side_by_side) silencing fd 1 at once could each save the
            # other's /dev/null as stdout and leave it silenced.
            with _BANNER_LOCK:
                if _HIGHS_BANNER_SILENCED:
                    super().createAndConfigureSolver(lp)
                else:
                    with _quiet_stdout():
                        super().createAndConfigureSolver(lp)
                    _HIGHS_BANNER_SILENCED = True
            # highspy registers a Python dispatcher as HiGHS's callback on every solver object, and a
            # solve then keeps entering Python, taking the GIL each time: while another thread of the
            # planner runs Python (a replay's bookkeeping, a worker's answers read in), the solve
            # waits for it. The planner sets no callback. Measured on the catalog-wide fleet's joint
            # ILP beside one busy Python thread: 4.85 s with the dispatcher, 2.76 s without (2.72 s
            # alone either way; the same optimum, the same nodes).
            lp.solverModel.disableCallbacks()

        def buildSolverModel(self, lp):
            """PuLP's own model for HiGHS (the same columns in the same order, name order; the same
            rows, entries and bounds), passed in three calls instead of one per column and row,
            each with its own Python-to-C++ conversion: that was a third of the fleet's ILP
            build (413 models)."""
            import highspy
            import numpy as np

            inf, h = highspy.kHighsInf, lp.solverModel
            sign = -1 if lp.sense == pulp.LpMaximize else 1
            variables = lp.variables()
            objective = lp.objective
            for i, var in enumerate(variables):
                var.index = i
            none = np.zeros(0, dtype=np.int32)
            h.addCols(len(variables), np.array([sign * objective.get(v, 0.0) for v in variables], dtype=np.float64),
                      np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=np.float64),
                      np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=np.float64),
                      0, none, none, np.zeros(0, dtype=np.float64))
            if self.mip:
                ints = [v.index for v in variables if v.cat == pulp.LpInteger]
                if ints:
                    h.changeColsIntegrality(len(ints), np.array(ints, dtype=np.int32),
                                            np.full(len(ints), int(highspy.HighsVarType.kInteger), dtype=np.uint8))
            starts, index, value, lower, upper = [], [], [], [], []
            for i, constraint in enumerate(lp._constraints.values()):
                starts.append(len(index))
                for var, coefficient in constraint.items():
                    if coefficient != 0:
                        index.append(var.index)
                        value.append(coefficient)
                constraint.index = i
                lb, ub = constraint.getLb(), constraint.getUb()
                lower.append(-inf if lb is None else lb)
                upper.append(inf if ub is None else ub)
            if starts:
                h.addRows(len(starts), np.array(lower, dtype=np.float64), np.array(upper, dtype=np.float64), len(index),
                          np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32),
                          np.array(value, dtype=np.float64))
            if self.mip and len(variables) < FEASIBILITY_JUMP_FROM_COLUMNS:
                h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
            for option in HIGHS_SUB_MIP_HEURISTICS if self.mip else ():
                h.setOptionValue(option, False)

else:  # highspy is not installed
    _QuietHiGHS = None


def solver_for(backend: str, time_limit_s: float, *, relaxation: bool = False):
    """The PuLP solver object for `backend` (highs or cbc), proving optimality (no relative gap);
    relaxation: for the linear relaxation (integrality ignored), a bound."""
    if backend == "highs":
        if _QuietHiGHS is None:
            raise InputError("solver.backend 'highs' (the default) needs the highspy package, a dependency of planner: "
                             "pip install highspy, or set solver: {backend: cbc}")
        # One thread: HiGHS's second thread (its default on 2 cores) cost CPU and no time. Measured on
        # the 128k rollout's re-solves, 18 ILPs: 0.29 CPU-s with it, 0.20 without, wall time less too;
        # the fleet's full-catalog joint ILP: 8.7 CPU-s and 9.5 s with it, 6.2 and 8.6 s without.
        return _QuietHiGHS(mip=not relaxation, msg=False, timeLimit=time_limit_s, gapRel=0.0, threads=1)
    if backend != "cbc":
        raise InputError(f"unknown solver backend '{backend}' (cbc, highs)")
    # PuLP 3.x warns that the bundled CBC goes away in 4.0; the project pins <4 precisely to keep it.
    # No `threads` option: with it the bundled CBC sometimes waits 10 s for a worker thread to
    # start ("Thread 0 used 0 times, waiting to start 10.000155" in its log) on a model it
    # solves in milliseconds.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(mip=not relaxation, msg=False, timeLimit=time_limit_s, gapRel=0.0, gapAbs=1e-9)


def lp_text(prob: pulp.LpProblem) -> str:
    """The problem as an .lp file's text (PuLP writes only to a path)."""
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".lp")
    os.close(fd)
    try:
        prob.writeLP(path)
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)
