"""The report's latency section: per pool and band, each target beside the model's prediction
and the simulator's value, with a verdict; and how certification changed the plan."""

from __future__ import annotations

import math

from planner.plan_objects import Plan
from planner.pool_check import (
    CLOSE_SHARE,
    CONFIRM_RUNS,
    MOST_CLOSE,
    MOST_RUNS,
    RUN_SPAN_S,
    TAIL_WINDOW,
    UNDECIDED_ERRORS,
    BandCheck,
    PoolCheck,
    TargetCheck,
    apart_text,
    few_beyond,
    latency_text,
    limit_text,
    missing_tail_parts,
    undecided,
    undecided_phrase,
)
from planner.sim_measures import COMPARE_KEYS, MOST_SETTLING_SHARE, SETTLING_DEFICIT
from planner.simulate import DEFAULT_WARMUP_FRACTION
from planner.targets import statistic_quantile
from planner.traffic import REPLAY_MAX_REQUESTS
from planner.units import replicas_text, share_text

_WHAT = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL (per token)"}


def replayed_rate_text(plan: Plan) -> str:
    """The rate certification replayed each pool at (plan_setup.pool_details), in words; a class its own
    bursts set is named (its peak is not its share of the whole's)."""
    own = [tc.label for tc in plan.own_burst_classes]
    instead = f"for the {' and '.join(own)} pool, its class's own bursts' rate instead of its share" if own else ""
    if plan.given_fleet:
        return f"its share of the peak rate{f' ({instead})' if own else ''}"
    return (f"the rate it is planned to carry (its share of the peak × headroom {plan.scenario.traffic.headroom:g}"
            f"{f'; {instead}' if own else ''})")


def _value(seconds: float, kind: str, error_s: float = math.nan) -> str:
    """A latency in the report's units ('2.22 s', '94.8 ms'), with its standard error where known
    ('94.8 ± 2.4 ms')."""
    return latency_text(seconds, kind, error_s) if math.isfinite(seconds) else "—"


def replay_text(c: PoolCheck, growth: float) -> str:
    """A pool's log replay (pool_check.TraceReplay) and its verdict, for the report and `planner
    simulate`: "the log's own arrivals (19,366 requests over 38.9 minutes, its time compressed × 1.5
    for the scenario's growth, dealt in turn to the pool's 3 replicas: 2.765 requests/s a replica on
    average, 56% of the 4.946 its sampled runs replay): every target holds"."""
    r = c.replay
    compressed = f", its time compressed × {growth:g} for the scenario's growth" if growth != 1 else ""
    # The log's own load, beside the rate the sampled runs replay (the plan's, or a stated fleet's peak):
    # a log quieter than that tests its bursts and lengths, not that load (the sampled runs test it).
    load = ""
    if r.span_s > 0 and c.rate_rps > 0:
        mean = r.requests / r.span_s / c.replicas
        load = (f": {mean:,.3f} requests/s a replica on average, {mean / c.rate_rps:.0%} of the "
                f"{c.rate_rps:,.3f} its sampled runs replay")
    return (f"the log's own arrivals ({r.requests:,} request{'s' if r.requests != 1 else ''} over "
            f"{r.span_s / 60:,.1f} minutes{compressed}, dealt in "
            f"turn to the pool's {replicas_text(c.replicas)}{load}): "
            + ("every target holds" if r.holds else "misses: " + "; ".join(r.problems)))


# A pool of a plan whose other pools replay the log but which was dealt none of it: each of a class's
# pools takes the log's requests by its part of the class's rate (certification._dealt_to), and a
# small part of a class with few logged requests can round to none.
NOT_DEALT_TEXT = ("the log's own arrivals: none of its class's logged requests fall to this pool (a class's pools are "
                  "dealt them by their parts of its rate, and this pool's part comes to none of them); its sampled "
                  "runs alone test it")


def seeds_text(seeds: list[int]) -> str:
    """'0, 1, 2, 3', or a run of more consecutive seeds as '0–15'."""
    if len(seeds) > CONFIRM_RUNS and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _target(c: TargetCheck) -> str:
    """'p99 ≤ 2.00 s': the limit in the column's decimals, or in as many more as it was stated with (a
    TTFT limit of 0.085 s read '≤ 0.09 s', beside a prediction of 0.08)."""
    return f"{c.stat} ≤ {limit_text(c.limit_s, c.kind)}"


def band_rows(bands: tuple[BandCheck, ...], *, simulated: bool = True, past_roofline: bool = False) -> list[str]:
    """The bands' targets, predicted and (where `simulated`) simulated values and verdicts, as table
    rows. past_roofline: the model has no operating point at the pool's rate, so every target misses."""
    if not simulated:
        rows = ["| Band | Target | Predicted | Verdict |", "|---|---|---:|---|"]
        for b in bands:
            for c in b.checks:
                verdict = "**misses** (model): past the roofline at this rate" if past_roofline else _model_verdict(b, c)
                rows.append(f"| {b.band.label()} | {_WHAT[c.kind]} {_target(c)} | "
                            f"{apart_text(c.predicted_s, c.limit_s, c.kind)} | {verdict} |")
        return rows
    rows = ["| Band | Requests measured | Target | Predicted | Simulated | Verdict |", "|---|---:|---|---:|---:|---|"]
    for b in bands:
        for c in b.checks:
            target, predicted, simulated, verdict = target_cells(b, c)
            rows.append(f"| {b.band.label()} | {b.requests:,} | {target} | {predicted} | {simulated} | {verdict} |")
    return rows


def target_cells(b: BandCheck, c: TargetCheck) -> tuple[str, str, str, str]:
    """A simulated target's target, predicted value, simulated value and verdict, as the report's
    table and `planner simulate` print them."""
    verdict = "holds" if c.holds else "**misses**"
    if c.undecided:  # only after MOST_RUNS runs: a miss, on either side (pool_check)
        verdict = (f"{'**undecided**' if c.holds else verdict}: {undecided_phrase('its limit')}"
                   + (", counted as a miss" if c.holds else ""))
    if not math.isfinite(c.simulated_s):
        verdict = _model_verdict(b, c)
    if math.isfinite(c.simulated_s) and c.kind != "itl":  # an ITL is over the pool's decode tokens, not the band's requests
        verdict += _few_requests(b.requests if c.samples is None else c.samples, c.stat)
    # each value with the digits that tell it from the limit (a simulated 2.004 s read "2.00 s ... misses"),
    # or with its standard error, where runs were pooled
    simulated = (_value(c.simulated_s, c.kind, c.standard_error_s) if math.isfinite(c.standard_error_s)
                 else apart_text(c.simulated_s, c.limit_s, c.kind))
    return f"{_WHAT[c.kind]} {_target(c)}", apart_text(c.predicted_s, c.limit_s, c.kind), simulated, verdict


def _model_verdict(b: BandCheck, c) -> str:
    """A target's verdict by the model's prediction alone."""
    if not math.isfinite(c.predicted_s) and c.kind == "tpot" and b.requests:
        return "no TPOT: no request of the band has a second output token"
    if not math.isfinite(c.predicted_s):
        return "no request of the band in this pool"
    return "holds (model)" if c.predicted_s <= c.limit_s else "**misses** (model)"


def _few_requests(requests: int, stat: str) -> str:
    """', on few requests: ...' where a percentile of `requests` simulated values rests on its few
    largest (few_beyond); else ''."""
    if not few_beyond(requests, stat):
        return ""
    rank = round(requests * (1 - statistic_quantile(stat))) + 1
    largest = "largest" if rank == 1 else f"{rank}{ {2: 'nd', 3: 'rd'}.get(rank, 'th')} largest"
    return f", on few requests (the {stat} of {requests:,} is about their {largest})"


def _mean_rows(check: PoolCheck) -> list[str]:
    rows = ["| Mean model | Predicted | Simulated |", "|---|---:|---:|"]
    for k in COMPARE_KEYS:
        p, s = check.predicted.get(k), check.simulated.get(k)
        rows.append(f"| {k} | {_fmt(p, k)} | {_fmt(s, k)} |")
    return rows


def _fmt(v: float | None, key: str) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    if key == "kv_utilisation":
        return f"{v:.0%}"
    return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"


def latency_section(plan: Plan) -> str:
    """Markdown: the plan's certification, pool by pool and band by band."""
    cert = plan.certification
    if cert is None:
        return "\n".join([
            "## Latency targets",
            "",
            f"Predicted by the model only (planner/latency.py), each pool's replica at {replayed_rate_text(plan)}, "
            "the rate certification would replay it at; certification by simulation is off (`verify: false` or "
            "`planner solve --no-verify`).",
            *[line for pool in plan.pools for line in _predicted_only(pool, plan.scenario.thresholds)],
        ]) + "\n"
    lines = [
        "## Latency targets, certified by simulation",
        "",
        f"Each pool's replica replayed at {replayed_rate_text(plan)} through the paged-cache "
        f"scheduler simulator (planner/simulate.py; enough sampled requests for {cert.band_requests:,} measured in "
        f"every band and for {RUN_SPAN_S / 60:g} minutes of arrivals, at most {cert.requests:,} a run; seed {cert.seed}; measured are the requests that arrive past "
        f"the first {DEFAULT_WARMUP_FRACTION:.0%} and once the replica has settled (its batch within "
        f"{SETTLING_DEFICIT:.1%} of its settled level, from the run's own request lifetimes), and no later than as long "
        "before the last arrival, so that they decode while arrivals go on (either end trims at most "
        f"{MOST_SETTLING_SHARE:.0%} of a run's requests); a value within "
        f"{1 - CLOSE_SHARE:.0%} of its limit, either side (a percentile resting on the k requests beyond it: within "
        f"{TAIL_WINDOW:g}/√k where that is wider, {TAIL_WINDOW / math.sqrt(50):.0%} at k = 50, at most {MOST_CLOSE:.0%}), "
        "is judged again on "
        f"{CONFIRM_RUNS} runs pooled, seeds "
        f"{cert.seed} onwards, and on {CONFIRM_RUNS} more at a time, up to {MOST_RUNS}, while the pooled value lies "
        f"within {UNDECIDED_ERRORS:g} standard errors of its limit; ± is that standard error, from the spread of the "
        f"runs' own values; a value still that close after {MOST_RUNS} runs cannot be told from its limit and counts "
        "as a miss), beside the model's prediction (planner/latency.py) at the same rate. "
        "TTFT (time to first token) is per request, from its arrival to its first output token; TPOT (time per "
        "output token) is per request, (last token − first token) / (output tokens − 1); ITL (inter-token latency) "
        "is per token. "
        "The mean model's rows average over the run's time, idle moments included: resident_batch counts the "
        "sequences decoding; kv_utilisation is the cache held over the KV budget, where the simulator also holds "
        "the blocks of each prompt's chunks prefilled so far and the model only the decoders'; itl_ms_p99 is the "
        "99th percentile of every decode token's gap, whether or not a target states it (a streamed answer's longest "
        "pauses: the steps that carry prompts' chunks); the model's is read from its chain of step lengths, on which "
        "it plans an ITL target, except where θ caps a prompt's tokens a step (several prompts' chunks then share "
        "one, and the model takes every such step as full, high by as much as a step holds capped chunks: not "
        "shown); certification judges an ITL target by the simulation.",
    ]
    replayed_log = any(pool.check is not None and pool.check.replay is not None for pool in plan.pools)
    if not replayed_log:
        # Said where no log's own arrivals were replayed: a burst inside a minute the peak does not show
        # broke the 128k rollout's short pool (TPOT p99 52-59 ms against 50 ms) where the same requests in a
        # timestamped log were caught by its replay (an outside audit).
        why = (f"a log is replayed where it has timestamps finer than whole minutes and at most "
               f"{REPLAY_MAX_REQUESTS:,} requests, each pool its part" if plan.scenario.traffic.source.log is not None
               else "only a log's are, and the source is no log")
        lines += ["", f"Every run has Poisson arrivals at the pool's rate, and no log's own arrivals were replayed "
                  f"({why}): bursts within a minute above the peak's rate are not tested."]
    if cert.rounds:
        lines += ["", f"Certification re-planned {cert.rounds} time{'s' if cert.rounds > 1 else ''}: a pool that missed "
                  "in simulation was planned again at its simulated capacity (the highest rate at which each of its verdict's "
                  "first runs, four at most, holds on its own, by bisection, at least 2% below the rate that missed, and held there "
                  "on runs of other seeds, pooled as certification judges a pool)"
                  + ("; one that held with Poisson arrivals but missed under the log's own, a replica's share lower."
                     if replayed_log else ".")]
        lines += [f"- {c}" for c in cert.changes]
    if cert.challenges:
        # shown whether or not a round re-planned: a plan whose replays all held is challenged too
        lines += ["", "Certification then challenged the plan: solved again with no class's simulated / model ratio "
                  "(a ratio measured on one config need not hold on another), a plan cheaper with a pool priced by "
                  "such a ratio was replayed, and kept where every pool held at its rate."]
        lines += [f"- {c}" for c in cert.challenges]
    for pool in plan.pools:
        c = pool.check
        verdict = "every target holds" if c.holds else "misses: " + "; ".join(c.misses)
        still_close = ""
        if c.runs > CONFIRM_RUNS and not c.undecided:  # an undecided value's miss says so itself
            still_close = (f", and {c.runs - CONFIRM_RUNS} runs pooled left a value within {UNDECIDED_ERRORS:g} standard "
                         "errors of its limit")
        runs = (f" in {c.runs} runs (seeds {seeds_text(c.seeds)}: {c.pooled_because}{still_close}; the mean model's "
                "simulated column is the first run's)") if c.runs > 1 else ""
        lines += ["", f"**{c.label}** — {c.config}, {c.rate_rps:,.3f} requests/s per replica, {c.requests * c.runs:,} "
                  f"requests simulated{runs}: {verdict}.", ""]
        if c.queue_settling is not None:
            lines += [f"Queue: {c.queue_settling.text()}.", ""]
        lines += band_rows(c.bands)
        if c.attainment is not None:
            goal, pred, sim = c.attainment
            error = f" ± {c.attainment_error:.1%}" if math.isfinite(c.attainment_error) else ""
            if undecided(sim, goal, c.attainment_error):
                error += f", {undecided_phrase('the goal')}" + (": counted as a miss" if sim >= goal else "")
            lines += ["", f"Attainment (requests meeting both their TTFT and TPOT targets): goal {goal:.1%}, predicted "
                      f"{pred:.1%}, simulated {sim:.1%}{error}."]
        if c.replay is not None:
            lines += ["", f"Replayed with {replay_text(c, plan.scenario.traffic.growth)}.", ""]
            lines += band_rows(c.replay.bands)
        elif replayed_log:
            lines += ["", f"Not replayed with {NOT_DEALT_TEXT}."]
        lines += tail_lines(pool, plan.scenario.thresholds)
        lines += ["", *_mean_rows(c)]
    return "\n".join(lines) + "\n"


def tail_lines(pool, thresholds) -> list[str]:
    """A line for each part of a band that misses its percentile target on its own where the band
    holds it (missing_tail_parts): the band's own verdict is over all its requests, and does not say so."""
    out = []
    for t in missing_tail_parts(pool, thresholds):
        predicted = f"{apart_text(t.predicted_s, t.limit_s, t.kind)} predicted"
        if not math.isfinite(t.simulated_s):
            read = predicted
        elif t.measured:
            close = f", within {1 - CLOSE_SHARE:.0%} of the limit: a close call" if t.close_call else ""
            read = f"{apart_text(t.simulated_s, t.limit_s, t.kind)} simulated on {t.requests:,} of them{close} ({predicted})"
        else:  # too few to judge by: the model's value decides, the simulated one is shown for what it is
            read = f"{predicted} ({_value(t.simulated_s, t.kind)} simulated{_few_requests(t.requests, t.stat)})"
        allowed = 1 - statistic_quantile(t.stat)
        out += ["", f"**Requests with {t.part.range_text} ({share_text(t.share)} of this pool's requests in band "
                f"{t.band.label(quoted=True)}) miss {_WHAT[t.kind]} {t.stat} ≤ {limit_text(t.limit_s, t.kind)} on their own:** "
                f"{read}. The band's {t.stat} is over all its requests, and those of these over the limit are within "
                f"the {allowed:.0%} of the band it lets past. To hold them to a limit of their own, give them a band "
                f"(`slo.bands`: one ending at `prompt_below: {t.part.prompt_min_tokens}`, then one for them)."]
    return out


def tail_note(plan) -> str:
    """The decision's word on the parts of a band that read over a target on their own where the band
    holds it (tail_lines says each in full under its pool): 70b_enterprise's prompts of 8,192 tokens and
    more, a third of its requests, read TPOT p99 106.8 ms against 100 ms, which is part of what is
    decided, not a detail of the latency section. A part read in several pools is named once, with
    each pool's value. A part no larger than the share its band's percentile lets past (one request of
    fc70's 19,366 at 8,192 tokens and more, against p99's 1%) is not: the target as stated allows every
    one of them to miss, and the latency section says so under its pool."""
    several = len(plan.pools) > 1
    parts: dict[tuple, list[str]] = {}
    for pool in plan.pools:
        for t in missing_tail_parts(pool, plan.scenario.thresholds):
            if t.share <= 1 - statistic_quantile(t.stat):
                continue
            # the share is of the band's requests in this pool: a split pool holds only part of the band
            what = (f"requests with {t.part.range_text} miss {t.band.target_text(t.kind)} on their own "
                    f"({share_text(t.share)} of the requests in band {t.band.label(quoted=True)}"
                    + (f" of pool '{pool.traffic_class.name}')" if several else ")"))
            where = f" on {pool.config.gpu.id}" if several else ""
            close = " (a close call)" if t.close_call else ""
            read = f"{apart_text(t.judged_s, t.limit_s, t.kind)} {'simulated' if t.measured else 'predicted'}{where}{close}"
            parts.setdefault((what, pool.traffic_class.name), []).append(read)
    if not parts:
        return ""
    said = "; and ".join(f"{what}: {', '.join(reads)}" for (what, _), reads in parts.items())
    return (f" **Yet {said}**. A band's percentile is over all its requests, and lets these past; the latency "
            "section says how to give them a target of their own.")


def _predicted_only(pool, thresholds) -> list[str]:
    from planner.pool_check import predicted_bands

    return ["", f"**{pool.traffic_class.label}** — {pool.config.label(pool.traffic_class.max_model_len)}, "
                f"{pool.replay_rps:,.3f} requests/s a replica:", "",
            *band_rows(predicted_bands(pool), simulated=False, past_roofline=pool.replay_resident is None),
            *tail_lines(pool, thresholds)]
