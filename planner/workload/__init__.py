"""Workload: request logs → mergeable length histograms and arrival peaks (design.md, "Workload").

Data flows one way through one module per concept:
  columns (which columns, presets) → readers (streamed record batches) → rows / timestamps
  (usable rows, minutes) → accumulate (dense cell sums and fine marginals; its compiled
  loop is cell_kernel) → ingest (the pipeline) → summary (what `planner histogram`
  prints) and peaks (planning rate). histfile is the histogram file on disk (the Parquet
  format planner, Spark, Dask and SQL write); progress measures how far a read has gone
  (for the progress bar). synth makes seeded synthetic logs.

The pipeline's entry point is `planner.workload.ingest.ingest`. Nothing is re-exported
here: importing a light module (peaks, synth) must not load pyarrow's dataset machinery.
"""
