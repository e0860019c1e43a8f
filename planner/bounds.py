"""Bounds on every number a user can give, and the validated number types that carry them.

A number that reaches arithmetic (a price, a rate, a token count, a TFLOP/s figure) must
be a finite number of its kind inside a range that makes physical sense. Python and YAML
accept far more: `.nan`, `.inf`, `1e308`, `2**64`, and YAML 1.1 reads `on`/`yes` as true,
which pydantic would take as 1. Past the schema such values reach scipy's root finder,
numpy's int64 or the ILP solver and come back as tracebacks or as confident nonsense (a
25-trillion-GPU plan). So each field's type refuses non-finite numbers and booleans, and
has an upper bound: generous (10x to 1,000x past anything real), so that it refuses typos
and hostile values, never a real plan. Pydantic names the bound in its message ("Input
should be less than or equal to 1000").

Use the named types below for the fields they describe, or `real(...)`/`whole(...)` for a
field with bounds of its own, e.g. `itl_ms: real(gt=0, le=MAX_LATENCY_MS) = 50.0`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

# ---- the bounds, each with why it is safe -----------------------------------------------
# Tokens in one request: the histogram's last length edge (planner.histogram.LENGTH_EDGES);
# the longest published context window today is 10,485,760 (Llama 4 Scout).
MAX_TOKENS = 2**24
MAX_BLOCK_TOKENS = 1024  # tokens in one paged-cache block (engines use 1 to 256)
# Requests per second offered to one service: ten million, far above any single service;
# at least one a million seconds (11.6 days), so that a synthetic log's times fit in int64 ms.
MAX_RPS = 1e7
MIN_RPS = 1e-6
# A multiplier on measured demand (traffic.growth, a quarter's growth): a thousandfold.
MAX_GROWTH = 1e3
# Capacity planned per unit of peak (traffic.headroom).
MAX_HEADROOM = 100.0
# USD per GPU-hour: the dearest on-demand GPU in data/gpus.yaml is about $11 an hour, the
# cheapest cloud GPUs (spot) rent for about $0.10; below a tenth of a cent a price is a typo
# (and a cost too small for the ILP's cost tolerance of 1e-6 $/hour).
MAX_PRICE_USD_PER_GPU_HOUR = 1e3
MIN_PRICE_USD_PER_GPU_HOUR = 1e-3
# Dense tensor TFLOP/s of one GPU: a B200 does about 9,000 at fp4, a 2016 P100 about 19 at
# fp16; below 0.1 the step times overflow nothing useful.
MAX_TFLOPS = 1e5
MIN_TFLOPS = 0.1
# GB/s of one GPU's memory or links: a B200's HBM does 8,000, PCIe 3 x16 about 16.
MAX_BANDWIDTH_GB_S = 1e5
MIN_BANDWIDTH_GB_S = 0.1
# Memory of one GPU: the largest today hold 288 GB.
MAX_GPU_MEMORY_GIB = 4096.0
# GPUs in one fleet, pool or inventory: 26 times the 3.85 million data-center GPUs that all
# vendors shipped in 2023 (TechInsights, via HPCwire, 2024-06). A plan needing more
# cannot be bought; it is refused, not reported.
MAX_FLEET_GPUS = 100_000_000
# How a plan past it is refused (a class, a split, a fleet), and where its size comes from.
OVER_FLEET_BOUND = f"more than the {MAX_FLEET_GPUS:,} that bound any fleet (26 times the data-center GPUs shipped in 2023)"
DEMAND_FIELDS = "traffic.peak, traffic.growth and traffic.headroom"


def held_past_bound(in_use: int, idle: int, check: str) -> str:
    """Why a fleet holding committed GPUs idle beside those in use is refused, past the bound, naming
    `check` (the fields that state its commitments); '' within it. Commitments are bounded type by
    type, so together they can pass it."""
    if in_use + idle <= MAX_FLEET_GPUS:
        return ""
    return (f"the fleet holds {in_use + idle:,} GPUs ({in_use:,} in use and {idle:,} committed and idle), "
            f"{OVER_FLEET_BOUND}; check {check}")
# Tensor-parallel degree and GPUs per node: the largest scale-up domains are 72 to 576 GPUs.
MAX_TP = 1024
# Replicas a pool must keep at least (N+1 redundancy is 2).
MAX_MIN_REPLICAS = 10_000
# Parameters of one model: the largest published are about 2e12.
MAX_PARAMS = 10**15
# Layers, and widths of one layer (hidden size, heads, head_dim, experts), of a model.
MAX_LAYERS = 10_000
MAX_WIDTH = 2**24
# Requests drawn for a synthetic log or histogram: twenty million, about 5 GB of memory at the top
# (measured: the 128k rollout drawn with ten million solved in 15 s, at 2.6 GB; a hundred million
# ran past 18 GB).
MAX_SYNTHETIC_REQUESTS = 2 * 10**7
# Requests one simulation replays per pool: ten million, minutes of simulated scheduler steps.
MAX_SIMULATED_REQUESTS = 10**7
# Measured requests certification seeks in a band, at the least (simulation.band_requests); a run
# then replays at least ceil(500 / (1 - 0.1)) = 556, its first tenth the warm-up
# (planner.simulate.DEFAULT_WARMUP_FRACTION): the fewest `planner simulate --requests` takes.
MIN_BAND_REQUESTS = 500
MIN_RUN_REQUESTS = 556
# Bits a number format stores per element, scales included: at least one (the narrowest
# formats published are binary and ternary weights, 1 and 1.58 bits: BitNet, arXiv 2310.11453
# and 2402.17764), at most 64 (fp64). Below one bit a model's weights and cache weigh nothing.
MIN_BITS_PER_ELEMENT = 1.0
MAX_BITS_PER_ELEMENT = 64.0
# The least achieved share of a datasheet peak a GPU may state (EfficiencyShare).
MIN_EFFICIENCY = 0.01
# Seeds: numpy takes any non-negative integer; 64 bits is plenty.
MAX_SEED = 2**64 - 1
# Seconds of solver time one solve may take: a day.
MAX_SOLVER_SECONDS = 86_400.0
# Milliseconds: inter-token latency targets and per-step overheads (a minute).
MAX_LATENCY_MS = 60_000.0
# Seconds to first token: an hour (a 10M-token prompt takes minutes to prefill).
MAX_TTFT_S = 3_600.0
# Minutes from asking for a replica to its serving: a day (a node from a cold cloud region takes under an hour).
MAX_LEAD_MIN = 1_440.0
# A commitment's term in quarters: ten years, past any reservation a cloud sells and any depreciation schedule.
MAX_TERM_QUARTERS = 40


def _plain_number(value: Any) -> Any:
    """Refuse booleans where a number belongs (YAML 1.1 reads `on`, `yes`, `no` as booleans),
    and say "finite" first for nan and inf (pydantic would compare them with the bounds). Text is
    left to pydantic, which reads "8192" as a number, and for a float field "1e9", which YAML 1.1
    (no dot) reads as text."""
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "Input should be a number, not {value}", {"value": str(value).lower()})
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return value


_PLAIN = BeforeValidator(_plain_number)


def real(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
         le: float | None = None) -> Any:
    """A float type: finite, not a boolean, within the given bounds (give an upper one)."""
    return Annotated[float, _PLAIN, Field(gt=gt, ge=ge, lt=lt, le=le, allow_inf_nan=False)]


def whole(*, gt: int | None = None, ge: int | None = None, lt: int | None = None,
          le: int | None = None) -> Any:
    """An int type: not a boolean, within the given bounds (give an upper one)."""
    return Annotated[int, _PLAIN, Field(gt=gt, ge=ge, lt=lt, le=le)]


def _at_most_seed(value: int) -> int:
    """MAX_SEED as a bound, said in whole digits: pydantic prints an integer bound this large as a
    float (18446744073709552000), which is not the limit."""
    if value > MAX_SEED:
        raise PydanticCustomError("less_than_equal", "Input should be less than or equal to {le}", {"le": f"{MAX_SEED:,}"})
    return value


MAX_LABEL_CHARS = 200  # a catalog id or a band's name: a cell of the report's tables


def _label(value: Any) -> Any:
    """A name the reports print in a Markdown table cell and in one-line summaries: a '|' there
    adds a column, a newline ends the row, and other control characters reach the terminal."""
    if isinstance(value, str) and ("|" in value or any(ord(ch) < 32 or ord(ch) == 127 for ch in value)):
        raise PydanticCustomError("label_chars", "a name the reports print in their tables may not hold '|', a "
                                  "newline or another control character (got {value})", {"value": repr(value)})
    return value


# A name the reports print (a catalog id, a band's name): no '|' or control characters.
Label = Annotated[str, BeforeValidator(_label), Field(min_length=1, max_length=MAX_LABEL_CHARS)]

# ---- named types, one per kind of quantity ------------------------------------------------
Tokens = whole(ge=0, le=MAX_TOKENS)
PositiveTokens = whole(ge=1, le=MAX_TOKENS)
RateRps = real(ge=MIN_RPS, le=MAX_RPS)
Growth = real(gt=0, le=MAX_GROWTH)
PriceUsdPerGpuHour = real(ge=MIN_PRICE_USD_PER_GPU_HOUR, le=MAX_PRICE_USD_PER_GPU_HOUR)
Tflops = real(ge=MIN_TFLOPS, le=MAX_TFLOPS)
BandwidthGBs = real(ge=MIN_BANDWIDTH_GB_S, le=MAX_BANDWIDTH_GB_S)
GpuCount = whole(ge=0, le=MAX_FLEET_GPUS)
Fraction = real(gt=0, le=1)  # a share of something: (0, 1]
# A GPU's achieved share of a datasheet peak (catalog.Efficiency): at least 1%. The catalog's, calibrated
# on published measurements, lie between 0.397 and 0.91; a share near zero makes step times overflow
# (1e-300 did, with numpy's warnings).
EfficiencyShare = real(ge=MIN_EFFICIENCY, le=1)
Probability = real(gt=0, lt=1)  # a quantile strictly inside (0, 1)
Seed = Annotated[whole(ge=0), AfterValidator(_at_most_seed)]
Params = whole(gt=0, le=MAX_PARAMS)
Layers = whole(gt=0, le=MAX_LAYERS)
Width = whole(gt=0, le=MAX_WIDTH)
BitsPerElement = real(ge=MIN_BITS_PER_ELEMENT, le=MAX_BITS_PER_ELEMENT)
