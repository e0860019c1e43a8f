"""The plan as data for machines (`planner solve --json`), and the one line naming its pools
that miss in simulation."""

from __future__ import annotations

import math
from typing import Any

from planner.plan_objects import Plan
from planner.verification import unverified_speed


def uncertified_message(plan: Plan) -> str | None:
    """One line naming the pools that miss their targets in simulation, or None when the plan holds."""
    cert = plan.certification
    if cert is None or cert.certified:
        return None
    misses = " | ".join(
        f"{pool.traffic_class.label} on {pool.config.label(pool.traffic_class.max_model_len)}: "
        + "; ".join(pool.check.misses)
        for pool in plan.pools if not pool.check.holds
    )
    what = "the fleet" if plan.given_fleet else f"no plan holds its targets in simulation after {cert.joint_rounds} re-plans;"
    if plan.given_fleet:
        return f"{what} misses in simulation: {misses}"
    missed = [pool.check for pool in plan.pools if not pool.check.holds]
    if all(not c.problems and c.replay is not None for c in missed):  # Poisson arrivals held: the log's bursts did not
        misses += (" (its Poisson runs held: the log's own arrivals come in bursts above the planned peak, and each "
                   "re-plan adds one replica; raise the peak planned for, traffic.peak, or allow more re-plans, "
                   "simulation.max_rounds)")
    return f"{what} {misses}"


def unsimulated_fleet_message(plan: Plan) -> str | None:
    """For a stated fleet that was not simulated: one line naming the classes it cannot carry at
    their peak and the targets the model predicts it misses there, or None when the model finds
    none. (Without it the one-line summary and --json said nothing of what the report shows.)"""
    from planner.plan_objects import classes_short_of_capacity

    if not plan.given_fleet or plan.certification is not None:
        return None
    short = [f"{tc.label}: {rate:,.4g} req/s at the peak, capacity {capacity:,.4g} req/s"
             for tc, rate, capacity in classes_short_of_capacity(plan.pools, 1.0 / plan.scenario.traffic.headroom)]
    misses = [f"{pool.traffic_class.label}: {text}" for pool in plan.pools for text in _predicted_misses(pool)]
    parts = ([f"the fleet does not carry its peak ({'; '.join(short)})"] if short else []) + (
        [f"the model predicts it misses ({'; '.join(misses)})"] if misses else [])
    return "; ".join(parts) or None


def _predicted_misses(pool) -> list[str]:
    from planner.pool_check import miss_text, predicted_bands

    return [miss_text(b.band.name, c, c.predicted_s) for b in predicted_bands(pool) for c in b.checks
            if c.predicted_s > c.limit_s]


def _target_json(check, unit_scale: float) -> dict[str, Any]:
    return {"stat": check.stat, "target": check.limit_s * unit_scale, "predicted": _finite(check.predicted_s * unit_scale),
            "simulated": _finite(check.simulated_s * unit_scale),
            "simulated_standard_error": _finite(check.standard_error_s * unit_scale),
            # within two standard errors of the target after the most runs pooled (pool_check.MOST_RUNS)
            "undecided": check.undecided}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def log_replay_json(check) -> dict[str, Any] | None:
    """The pool's share of a timestamped log replayed with its own arrivals, dealt to its replicas in
    turn (pool_check.TraceReplay), whose verdict counts in the pool's `holds`; None where the traffic
    had no timestamps, no certification ran, or none of the log fell to the pool (a small part of a
    class's rate, report_latency.NOT_DEALT_TEXT)."""
    if check is None or check.replay is None:
        return None
    r = check.replay
    return {"requests": r.requests, "span_s": r.span_s, "targets": bands_json(r.bands), "holds": r.holds,
            "problems": list(r.problems)}


def queue_settling_json(check) -> dict[str, Any] | None:
    """The longer run that decided a growing queue the verdict's runs read (pool_check.QueueSettling):
    trends as fractions of the arrival rate, and what else the longer run missed (its targets,
    preemptions), which counts in the pool's problems; None where the runs read none (or no
    certification ran)."""
    if check is None or check.queue_settling is None:
        return None
    s = check.queue_settling
    return {"runs": s.runs, "requests_per_run": s.runs_requests, "runs_backlog_growth": s.runs_growth,
            "longer_run_requests": s.longer_requests, "longer_run_backlog_growth": s.longer_growth,
            "longer_run_grows": s.grows, "longer_run_misses": list(s.misses)}


def bands_json(bands, *, simulated: bool = True, past_roofline: bool = False) -> list[dict[str, Any]]:
    """Per band: each target (TTFT in s, TPOT and ITL in ms) with predicted and simulated values,
    and whether the band holds, judged_by the simulation or, where none ran, the model's prediction
    (past_roofline: the pool's rate has no operating point, so no band holds)."""
    out = []
    for b in bands:
        entry: dict[str, Any] = {"band": b.band.name, "requests_simulated": b.requests}
        for c in b.checks:
            key = {"ttft": "ttft_s", "tpot": "tpot_ms", "itl": "itl_ms"}[c.kind]
            entry[key] = _target_json(c, 1.0 if c.kind == "ttft" else 1e3)
        # by the model: a nan prediction (a band with no request in the pool, a TPOT no request
        # has) holds vacuously, as an unmeasured band does in simulation; past_roofline misses
        entry["holds"] = b.holds if simulated else not past_roofline and not any(
            c.predicted_s > c.limit_s for c in b.checks)
        entry["judged_by"] = "simulation" if simulated else "model"
        out.append(entry)
    return out


def _pool_bands(pool) -> list[dict[str, Any]]:
    if pool.check is not None:
        return bands_json(pool.check.bands)
    from planner.pool_check import predicted_bands

    return bands_json(predicted_bands(pool), simulated=False, past_roofline=pool.replay_resident is None)


def _labelled(fields: dict[str, Any], label: str) -> dict[str, Any]:
    """The pool's fields with its class's label for people after its name."""
    return {"pool": fields.pop("pool"), "label": label, **fields}


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as data: pools, totals, status, and every evaluated candidate (to check it independently)."""
    from planner.pool_check import missing_tail_parts

    sol = plan.solution
    pools = [
        {
            **_labelled(pool.fields(), pool.traffic_class.label),
            # what a replica is planned to carry, as the report's "Capacity / replica" and the candidates'
            # capacity_rps: the ILP's figure (Evaluation.capacity_rps); model_capacity_rps is the model's
            "capacity_rps": pool.planned_rps,
            "model_capacity_rps": pool.capacity.max_rps,
            # the requests/s (peak x headroom) this pool covers: its part of its class's, which
            # class_rate_rps gives whole (a class planned on several pools has a row for each)
            "rate_rps": pool.traffic_class.rate_rps * pool.class_part,
            "class_rate_rps": pool.traffic_class.rate_rps,
            # the class's peak × headroom at its share of the served peak: class_rate_rps unless its own
            # bursts set it higher (plan_objects.class_peak_rps; the report's Traffic section)
            "class_share_rate_rps": pool.traffic_class.share_peak_rps * plan.scenario.traffic.headroom,
            "class_part": pool.class_part,
            "binding": pool.capacity.binding,
            "cost_usd_per_hour": pool.cost_per_hour,
            # where capacity_rps comes from (Evaluation.planned_by): "model", "simulation" (measured for this
            # config), "held" (a rate its pool held at in simulation, its limit not searched), "log" (a
            # replica's share lower after the log's own arrivals missed), "calibration"
            # (the model's × planned_calibration, found on another config) or "bound"
            "planned_by": pool.planned_by,
            "planned_calibration": pool.calibration,
            # the peak before headroom each replica carries (rate_rps / replicas = this x headroom)
            "rate_per_replica_rps": pool.rate_per_replica_rps,
            # what certification replayed a replica at: the rate the plan covers (a stated fleet: the peak)
            "replay_rps_per_replica": pool.replay_rps,
            "bands": _pool_bands(pool),
            "holds": pool.check.holds if pool.check is not None else None,
            # runs pooled for the verdict: more than one where the first came close to a limit or preempted over budget
            "simulation_runs": pool.check.runs if pool.check is not None else None,
            # requests sampled a run: enough for every band's measured requests and half an hour of arrivals,
            # at most the scenario's simulation.requests
            "simulation_requests_per_run": pool.check.requests if pool.check is not None else None,
            "queue_settling": queue_settling_json(pool.check),
            # a band's requests at or over a split threshold (at the next prompt edge) that miss its
            # percentile target on their own where the band holds it (pool_check.missing_tail_parts)
            "band_parts_missing": [
                {"band": t.band.name, "prompt_min_tokens": t.part.prompt_min_tokens,
                 "prompt_below_tokens": t.part.prompt_below_tokens, "share_of_band": t.share, "kind": t.kind,
                 "stat": t.stat, "limit_s": t.limit_s, "predicted_s": _finite(t.predicted_s),
                 "simulated_s": _finite(t.simulated_s), "simulated_requests": t.requests,
                 # the simulated value where it rests on enough requests, else the model's (TailPart.misses)
                 "judged_by": "simulation" if t.measured else "model", "close_call": t.close_call}
                for t in missing_tail_parts(pool, plan.scenario.thresholds)],
            "log_replay": log_replay_json(pool.check),
        }
        for pool in plan.pools
    ]
    candidates = [
        {
            "split_threshold": None if evaluation.traffic_class.option == "none" else int(evaluation.traffic_class.option),
            "class": evaluation.traffic_class.name,
            "gpu": evaluation.config.gpu.id,
            "tp": evaluation.config.tp,
            "weight_dtype": evaluation.config.weight_dtype,
            "kv_dtype": evaluation.config.kv_dtype,
            "context_limit": evaluation.traffic_class.max_model_len,
            "price_usd_per_gpu_hour": evaluation.config.price_usd_per_hour,
            # null where the search did not size this one (Evaluation.unsized: dominated_by names the
            # variant that serves more, capacity_bound_rps is the bound; planner.plan_search.LazySearch)
            "capacity_rps": None if evaluation.unsized else evaluation.capacity_rps,
            "model_capacity_rps": (None if evaluation.unsized
                                   else evaluation.capacity.max_rps if evaluation.capacity else 0.0),
            "capacity_bound_rps": evaluation.optimistic_rps,
            "dominated_by": evaluation.dominated_by or None,
            "binding": evaluation.capacity.binding if evaluation.capacity else None,
            "problem": evaluation.problem or None,
            "class_rate_rps": evaluation.traffic_class.rate_rps,
        }
        for evaluation in plan.evaluations
    ]
    return {
        "scenario": plan.scenario.name,
        "plan": pools,
        "cost_usd_per_hour": plan.cost_per_hour,
        "cost_usd_per_month": plan.cost_per_month,
        "cost_usd_per_million_tokens": plan.cost_per_million,
        "split_threshold": sol.threshold,
        "gpus": sol.gpus,
        "peak_rps": plan.peak_rps,
        "headroom": plan.scenario.traffic.headroom,
        # requests longer than the context limit: rejected, in neither the costs nor the tokens (the
        # report's Decision says so in bold)
        "context_limit": plan.context_limit,
        "rejected_requests": plan.rejected_requests,
        "rejected_share": plan.rejected_share,
        "solver_status": sol.status,
        "solver": sol.solver,
        "certified": plan.certification.certified if plan.certification else None,
        "certification_rounds": plan.certification.rounds if plan.certification else None,
        # the rounds' re-plans, then what each challenger did (the report gives each its own lead sentence)
        "certification_changes": [*plan.certification.changes, *plan.certification.challenges] if plan.certification
        else [],
        "given_fleet": plan.given_fleet,
        # a stated fleet: what simulation, or where none ran the model, finds it misses (null: nothing)
        "given_fleet_problem": (uncertified_message(plan) or unsimulated_fleet_message(plan)) if plan.given_fleet
        else None,
        "speed_unverified": [u.as_json() for u in unverified_speed(plan)],
        # where the traffic came from, and a log's rows left out and why (the report's Sources)
        "traffic_notes": list(plan.traffic_notes),
        "candidates": candidates,
    }
