"""Latency targets as users state them: per band of prompt length, at a statistic.

A band is the requests whose prompt length lies in [prompt_min_tokens, prompt_below_tokens):
a user knows the prompt when the request arrives, so that is what a time-to-first-token
promise can depend on. Each band may carry three targets, each at a statistic (mean, p50,
p90, p95 or p99, over the band's requests):
- TTFT: arrival to first output token;
- TPOT: per request, (last token - first token) / (output tokens - 1), as vLLM's
  `benchmark_serving.py` and MLPerf Inference define it (requests of one output token
  have none);
- ITL: the per-token gap, every decode token's wait for its step, token-weighted (what
  vLLM's benchmark reports as ITL).
An attainment goal asks that a share of all requests meet both their band's TTFT and TPOT
targets at once (DistServe's goodput, Zhong et al., OSDI 2024).

These are domain objects: the scenario file's schema (planner.scenario) builds them,
the capacity model, the simulator's check and the report read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

STATISTICS = ("mean", "p50", "p90", "p95", "p99")
DEFAULT_STATISTIC = "p99"
# Default targets when a scenario states none: MLPerf Inference's server-scenario latency
# constraints for Llama 3.1 8B (v5.1 rules: TTFT p99 <= 2 s, TPOT p99 <= 100 ms).
DEFAULT_TTFT_S = 2.0
DEFAULT_TPOT_MS = 100.0


@lru_cache(maxsize=16)
def statistic_quantile(stat: str) -> float | None:
    """'p99' -> 0.99; 'mean' -> None. Remembered: a capacity search asks it of every target at
    every operating point (Target.exceed_share)."""
    if stat not in STATISTICS:
        raise ValueError(f"unknown statistic {stat!r}; choose from {', '.join(STATISTICS)}")
    return None if stat == "mean" else int(stat[1:]) / 100


@dataclass(frozen=True)
class Target:
    """A limit on one latency at one statistic; `limit_s` in seconds whatever the scenario's unit."""

    stat: str
    limit_s: float

    def __post_init__(self):
        statistic_quantile(self.stat)
        if not (self.limit_s > 0 and math.isfinite(self.limit_s)):
            raise ValueError(f"a latency target must be a positive finite number of seconds (got {self.limit_s})")

    @property
    def quantile(self) -> float | None:
        return statistic_quantile(self.stat)

    @property
    def exceed_share(self) -> float | None:
        """Share of requests (or tokens) allowed above the limit: 0.01 for p99; None for the mean."""
        q = self.quantile
        return None if q is None else 1.0 - q

    def text(self, what: str, unit: str) -> str:
        """The target for people, its limit in `unit` (s or ms): 'TTFT p99 ≤ 2 s'."""
        value = self.limit_s if unit == "s" else self.limit_s * 1e3
        return f"{what} {self.stat} ≤ {value:g} {unit}"


@dataclass(frozen=True)
class Band:
    """Requests with prompt_min_tokens <= prompt < prompt_below_tokens (None: no upper bound)."""

    name: str
    prompt_min_tokens: int
    prompt_below_tokens: int | None
    ttft: Target | None = None
    tpot: Target | None = None
    itl: Target | None = None

    def holds(self, prompt_tokens):
        """Mask of the prompts (an array or a number) that fall in this band."""
        inside = prompt_tokens >= self.prompt_min_tokens
        if self.prompt_below_tokens is not None:
            inside = inside & (prompt_tokens < self.prompt_below_tokens)
        return inside

    @property
    def range_text(self) -> str:
        lo, hi = self.prompt_min_tokens, self.prompt_below_tokens
        if hi is None:
            return "every prompt" if lo == 0 else f"prompt ≥ {lo:,} tokens"
        return f"prompt < {hi:,} tokens" if lo == 0 else f"{lo:,} ≤ prompt < {hi:,} tokens"

    def label(self, quoted: bool = False) -> str:
        """The band's name for a reader, its prompt range beside it unless the name is that range."""
        name = f"'{self.name}'" if quoted else self.name
        return name if self.name == self.range_text else f"{name} ({self.range_text})"

    def target_text(self, kind: str) -> str:
        """One of its targets for people: 'TPOT p99 ≤ 100 ms' (kind: ttft, tpot or itl)."""
        return getattr(self, kind).text(kind.upper(), "s" if kind == "ttft" else "ms")

    def targets_text(self) -> str:
        parts = [self.target_text(kind) for kind in ("ttft", "tpot", "itl") if getattr(self, kind) is not None]
        return ", ".join(parts) if parts else "no target"


@dataclass(frozen=True)
class SLO:
    """The latency targets of a traffic class: its bands in prompt order, and an attainment goal."""

    bands: tuple[Band, ...] = ()
    attainment: float | None = None

    def __post_init__(self):
        lo = 0
        for b in self.bands:
            if b.prompt_min_tokens != lo:
                raise ValueError(f"band '{b.name}' starts at {b.prompt_min_tokens} tokens; bands must tile the prompt "
                                 f"lengths in order from 0 (expected {lo})")
            if b.prompt_below_tokens is None:
                lo = None
                break
            lo = b.prompt_below_tokens
        if self.bands and lo is not None:
            raise ValueError("the last band must have no upper bound (prompt_below)")
        if self.attainment is not None and not 0 < self.attainment < 1:
            raise ValueError(f"attainment must be a share in (0, 1) (got {self.attainment})")

    @property
    def has_targets(self) -> bool:
        return any(b.ttft or b.tpot or b.itl for b in self.bands) or self.attainment is not None

    @classmethod
    def single(cls, *, ttft_s: float | None = None, tpot_ms: float | None = None, itl_ms: float | None = None,
               stat: str = DEFAULT_STATISTIC) -> SLO:
        """One band for every prompt (the command line's targets)."""
        band = Band(
            "all", 0, None,
            ttft=Target(stat, ttft_s) if ttft_s is not None else None,
            tpot=Target(stat, tpot_ms / 1e3) if tpot_ms is not None else None,
            itl=Target(stat, itl_ms / 1e3) if itl_ms is not None else None,
        )
        return cls((band,))
