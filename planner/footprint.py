"""The bytes a resident sequence of a traffic class holds on one deployment, and how many the
KV budget holds in each sizing mode (expected, worst case, percentile by the compound-Poisson
total of planner.paged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.deployment import Deployment
from planner.memo import ObjectMemo
from planner.memory import (
    BudgetLadder,
    KVLayout,
    kv_bytes_for_tokens,
    kv_bytes_per_token_by_layer_kind,
    paged_tokens,
    users_that_fit,
)
from planner.paged import SIZING_MODES, TokenProfile, max_mean_count_for_quantile

PERCENTILE_GRID_UNITS = 1024  # byte-grid resolution of the compound-Poisson total


@dataclass(frozen=True)
class Footprint:
    """Bytes a resident sequence of the class holds, per sizing mode."""

    mean_bytes: float  # time-weighted mean (expected mode)
    worst_case_bytes: float  # at the context limit
    read_bytes: float  # bytes a decode step reads per sequence (shared prefix included)
    shared_prefix_bytes: float  # held once per replica
    budget_bytes: float  # KV budget left for sequences after the shared prefix



def footprint(dep: Deployment, prof: TokenProfile, ladder: BudgetLadder) -> Footprint:
    """Convert the class's token profile to bytes for this deployment's dtype, tp and window;
    a linear-attention / state-space model's fixed state adds to every resident sequence."""
    layout = kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp)
    state = float(layout.state_bytes_per_sequence)
    shared_tokens = prof.shared_prefix_blocks * prof.block_size
    shared_bytes = float(kv_bytes_for_tokens(dep.model, shared_tokens, dep.kv_dtype, dep.tp)) if shared_tokens else 0.0
    mean = prof.mean_paged_tokens * layout.uncapped_bytes_per_token + prof.mean_window_tokens * layout.capped_bytes_per_token + state
    held_limit = paged_tokens(dep.max_model_len, prof.block_size)
    worst = float(kv_bytes_for_tokens(dep.model, held_limit, dep.kv_dtype, dep.tp)) + state - shared_bytes
    return Footprint(
        mean_bytes=mean,
        worst_case_bytes=worst,
        read_bytes=mean + shared_bytes,
        shared_prefix_bytes=shared_bytes,
        budget_bytes=ladder.kv_budget_bytes - shared_bytes,
    )


def memory_concurrency(dep: Deployment, prof: TokenProfile, fp: Footprint, quantile: float) -> dict[str, float]:
    """Most resident sequences the KV budget holds, in each sizing mode (continuous; floor for users)."""
    if fp.budget_bytes <= 0:
        return dict.fromkeys(SIZING_MODES, 0.0)
    worst = users_that_fit(fp.budget_bytes, fp.worst_case_bytes) if fp.worst_case_bytes > 0 else math.inf
    expected = fp.budget_bytes / fp.mean_bytes if fp.mean_bytes > 0 else math.inf
    return {"worst_case": float(worst), "expected": expected, "percentile": _percentile_count(dep, prof, fp, quantile)}


def _level_bytes(dep: Deployment, prof: TokenProfile) -> np.ndarray:
    """_layout_level_bytes of the deployment's cache layout (remembered per layout and class)."""
    return _LEVEL_BYTES((kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp), prof))[0]


def _layout_level_bytes(layout: KVLayout, prof: TokenProfile) -> tuple[np.ndarray, float]:
    """Bytes a resident sequence holding j blocks keeps, for each level j of the profile (read-only),
    and their mean over the profile's levels."""
    tokens = np.arange(prof.level_weight.size) * prof.block_size
    # a capped layer keeps whole blocks of its window, as planner.paged's mean and the simulator do
    window = paged_tokens(layout.token_cap, prof.block_size) if layout.token_cap else 0
    level_bytes = (
        tokens * layout.uncapped_bytes_per_token + np.minimum(tokens, window) * layout.capped_bytes_per_token
        + layout.state_bytes_per_sequence
    )
    level_bytes.flags.writeable = False
    return level_bytes, float(np.dot(prof.level_weight, level_bytes) / prof.level_weight.sum())


_LEVEL_BYTES = ObjectMemo(_layout_level_bytes, kept=256)  # a profile holds its level arrays: fewer kept


def percentile_count_bound(dep: Deployment, prof: TokenProfile, fp: Footprint) -> float:
    """An upper bound on _percentile_count without its quantiles: the count whose mean footprint
    fills the budget (max_mean_count_for_quantile never returns more than the grid's budget over
    the grid's mean, which is at most this; 1e-6 over for rounding)."""
    if fp.budget_bytes <= 0:
        return 0.0
    _, mean = _LEVEL_BYTES((kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp), prof))
    return fp.budget_bytes / mean * (1 + 1e-6) if mean > 0 else math.inf


def _percentile_count(dep: Deployment, prof: TokenProfile, fp: Footprint, quantile: float) -> float:
    level_bytes = _level_bytes(dep, prof)
    levels = np.arange(level_bytes.size)
    unit = max(fp.budget_bytes / PERCENTILE_GRID_UNITS, float(level_bytes[1] - level_bytes[0]) if levels.size > 1 else 1.0)
    # Mean-preserving discretisation: each footprint's mass is split between the two grid
    # points around it in proportion to its distance, so E[X] is exact on the grid.
    scaled = level_bytes / unit
    lower = np.floor(scaled).astype(np.int64)
    frac = scaled - lower
    size = int(lower.max()) + 2
    pmf = np.bincount(lower, weights=prof.level_weight * (1 - frac), minlength=size)
    pmf += np.bincount(lower + 1, weights=prof.level_weight * frac, minlength=size)
    pmf = pmf / pmf.sum()
    return max_mean_count_for_quantile(pmf, quantile, math.floor(fp.budget_bytes / unit))
