"""The joint length histogram: the workload as the models consume it.

One row per non-empty cell of (prompt bin, output bin, total bin), with the exact
request count and exact per-cell sums of prompt, output, prompt², prompt×output
and output², so every mean the models need is exact rather than a bin-centre
guess. Histograms add: merging two is adding the rows of equal cells, which is
what makes a log too large for one machine histogrammable where it lives.

Bins (public constants, so Spark/SQL can reproduce them):
- prompt and output: log-spaced, quarter-octave edges PROMPT_EDGES; bin i holds
  edges[i] <= n < edges[i+1]; the last bin is open-ended.
- total (prompt + output): TOTAL_EDGES, the thresholds a split or a context
  limit may use; bin j holds TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j] (bin 0 is
  total <= TOTAL_EDGES[0]); so "total <= T" is exact for every T in TOTAL_EDGES.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _length_edges() -> np.ndarray:
    quarter_octaves = np.unique(np.round(2.0 ** (np.arange(0, 4 * 24 + 1) / 4)).astype(np.int64))
    return np.concatenate([[0], quarter_octaves])


LENGTH_EDGES = _length_edges()  # 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, ... 2**24
PROMPT_EDGES = LENGTH_EDGES
OUTPUT_EDGES = LENGTH_EDGES
TOTAL_EDGES = np.array(
    sorted({2**k for k in range(7, 25)} | {3 * 2**k for k in range(7, 24)}), dtype=np.int64
)  # 128, 192, 256, 384, ..., 8192, 12288, 16384, ..., 131072, ..., 2**24

CELL_KEYS = ("prompt_bin", "output_bin", "total_bin")
SUM_COLUMNS = ("count", "sum_prompt", "sum_output", "sum_prompt_sq", "sum_prompt_output", "sum_output_sq")


def length_bin(n: np.ndarray) -> np.ndarray:
    """Prompt/output bin index: edges[i] <= n < edges[i+1] (last bin open)."""
    return np.searchsorted(LENGTH_EDGES, n, side="right").astype(np.int32) - 1


def total_bin(total: np.ndarray) -> np.ndarray:
    """Total bin index: TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j]."""
    return np.minimum(np.searchsorted(TOTAL_EDGES, total, side="left"), len(TOTAL_EDGES) - 1).astype(np.int32)


@dataclass(frozen=True, eq=False)
class Histogram:
    """Cells as parallel numpy arrays, sorted by (total_bin, prompt_bin, output_bin).

    `minute` / `minute_count`: arrivals per wall-clock minute (minute = floor(epoch s / 60)),
    sorted by minute; empty when the source had no timestamps.
    """

    prompt_bin: np.ndarray
    output_bin: np.ndarray
    total_bin: np.ndarray
    count: np.ndarray
    sum_prompt: np.ndarray
    sum_output: np.ndarray
    sum_prompt_sq: np.ndarray
    sum_prompt_output: np.ndarray
    sum_output_sq: np.ndarray
    minute: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_arrays(
        cls, prompt: np.ndarray, output: np.ndarray, timestamps_s: np.ndarray | None = None
    ) -> Histogram:
        """Exact histogram of raw per-request lengths (and optional arrival times in seconds)."""
        p = np.asarray(prompt, dtype=np.int64)
        o = np.asarray(output, dtype=np.int64)
        if p.shape != o.shape:
            raise ValueError("prompt and output arrays differ in length")
        keys = np.stack([total_bin(p + o), length_bin(p), length_bin(o)]).astype(np.int64)
        if p.size:
            uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
        else:
            uniq, inverse = np.zeros((3, 0), np.int64), np.zeros(0, np.int64)
        inverse = inverse.reshape(-1)
        n = uniq.shape[1]

        def add(values: np.ndarray) -> np.ndarray:
            out = np.zeros(n, np.int64)
            np.add.at(out, inverse, values)
            return out

        minute = minute_count = np.zeros(0, np.int64)
        if timestamps_s is not None and len(timestamps_s):
            minutes = np.floor_divide(np.asarray(timestamps_s, dtype=np.float64), 60).astype(np.int64)
            minute, minute_count = np.unique(minutes, return_counts=True)
        return cls(
            prompt_bin=uniq[1].astype(np.int32),
            output_bin=uniq[2].astype(np.int32),
            total_bin=uniq[0].astype(np.int32),
            count=add(np.ones_like(p)),
            sum_prompt=add(p),
            sum_output=add(o),
            sum_prompt_sq=add(p * p),
            sum_prompt_output=add(p * o),
            sum_output_sq=add(o * o),
            minute=minute.astype(np.int64),
            minute_count=minute_count.astype(np.int64),
        )

    @classmethod
    def constant(cls, prompt_tokens: int, output_tokens: int, requests: int = 1) -> Histogram:
        """A class where every request has the same lengths (how benchmarks are run)."""
        return cls.from_arrays(np.full(requests, prompt_tokens), np.full(requests, output_tokens))

    def merge(self, other: Histogram) -> Histogram:
        """The histogram of the union of both sources' requests (exact)."""
        keys = np.concatenate([self._keys(), other._keys()], axis=1)
        uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
        inverse = inverse.reshape(-1)
        sums = {}
        for name in SUM_COLUMNS:
            out = np.zeros(uniq.shape[1], np.int64)
            np.add.at(out, inverse, np.concatenate([getattr(self, name), getattr(other, name)]))
            sums[name] = out
        minutes = np.concatenate([self.minute, other.minute])
        m_uniq, m_inv = np.unique(minutes, return_inverse=True)
        m_count = np.zeros(m_uniq.size, np.int64)
        np.add.at(m_count, m_inv.reshape(-1), np.concatenate([self.minute_count, other.minute_count]))
        return Histogram(
            total_bin=uniq[0].astype(np.int32),
            prompt_bin=uniq[1].astype(np.int32),
            output_bin=uniq[2].astype(np.int32),
            minute=m_uniq.astype(np.int64),
            minute_count=m_count,
            **sums,
        )

    def _keys(self) -> np.ndarray:
        return np.stack([self.total_bin, self.prompt_bin, self.output_bin]).astype(np.int64)

    # ---- selection ----------------------------------------------------------
    def select_total(self, above: int | None = None, at_most: int | None = None) -> Histogram:
        """Requests with above < prompt+output <= at_most; both bounds must be TOTAL_EDGES."""
        mask = np.ones(self.count.size, bool)
        for bound in (above, at_most):
            if bound is not None and bound not in TOTAL_EDGES:
                raise ValueError(f"total-length bound {bound} is not a histogram edge (TOTAL_EDGES)")
        if above is not None:
            mask &= TOTAL_EDGES[self.total_bin] > above
        if at_most is not None:
            mask &= TOTAL_EDGES[self.total_bin] <= at_most
        return self._subset(mask)

    def _subset(self, mask: np.ndarray) -> Histogram:
        cells = {name: getattr(self, name)[mask] for name in (*CELL_KEYS, *SUM_COLUMNS)}
        return Histogram(**cells, minute=self.minute, minute_count=self.minute_count)

    # ---- moments ------------------------------------------------------------
    @property
    def requests(self) -> int:
        return int(self.count.sum())

    @property
    def is_empty(self) -> bool:
        return self.requests == 0

    def mean(self, column: str) -> float:
        """Exact mean of a summed column per request, e.g. mean('sum_output_sq') = E[o²]."""
        n = self.requests
        return float(getattr(self, column).sum()) / n if n else 0.0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        names = (*CELL_KEYS, *SUM_COLUMNS, "minute", "minute_count")
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in names)

    __hash__ = None  # type: ignore[assignment]
