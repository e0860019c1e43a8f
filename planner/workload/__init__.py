"""Workload: request logs → mergeable length histograms and arrival peaks (design.md, "Workload").

Data flows one way through one module per concept:
  columns (which columns, presets) → readers (streamed record batches) → rows / timestamps
  (usable rows, minutes) → accumulate (dense cell sums) → ingest (the pipeline, histogram
  files in and out) → summary (what `planner histogram` prints) and peaks (planning rate).
  synth makes seeded synthetic logs and histograms; atomic writes files all-or-nothing.

The pipeline's entry point is `planner.workload.ingest.ingest` (not re-exported here, so
that `planner.workload.ingest` stays the module).
"""

from planner.workload.columns import PRESETS, ColumnSpec, resolve_columns
from planner.workload.ingest import IngestResult, write_histogram_file
from planner.workload.peaks import peak_rate_rps
from planner.workload.summary import WorkloadSummary, format_summary, summarize
from planner.workload.synth import DISTRIBUTIONS, generate, synthetic_histogram

__all__ = [
    "DISTRIBUTIONS",
    "PRESETS",
    "ColumnSpec",
    "IngestResult",
    "WorkloadSummary",
    "format_summary",
    "generate",
    "peak_rate_rps",
    "resolve_columns",
    "summarize",
    "synthetic_histogram",
    "write_histogram_file",
]
