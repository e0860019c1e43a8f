"""Workload: request logs → mergeable length histograms and arrival peaks (design.md, "Workload").

Data flows one way through one module per concept:
  columns (which columns, presets) → readers (streamed record batches) → rows / timestamps
  (usable rows, minutes) → accumulate (dense cell sums) → ingest (the pipeline, histogram
  files in and out) → summary (what `planner histogram` prints) and peaks (planning rate).
  synth makes seeded synthetic logs and histograms; atomic writes files all-or-nothing.

The pipeline's entry point is `planner.workload.ingest.ingest`. Nothing is re-exported
here: importing a light module (peaks, synth) must not load pyarrow's dataset machinery.
"""
