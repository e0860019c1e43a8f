"""Calibration of the roofline's efficiency factors against published measurements.

The measurements are copied into `data/measured/` (its README.md gives sources and
licences). Each row is predicted with the planner's own model, and the six factors of
`catalog.Efficiency` (bandwidth, compute, step_overhead_ms, allreduce_latency_us,
interconnect, layer_overhead_us) are fitted where each shows; the rows not fitted on are
reported separately, as the measurements' README asks.

The package, in the order the data flow through it:
- `measured`: the CSV rows (TensorRT-LLM offline throughput, Splitwise-sim) and the labels
  that map them to catalog ids;
- `predict`: each row as a Deployment and its prediction by the planner's own model;
- `fit`: bounded least squares of log(predicted / measured) for one GPU's factors;
- `joint_fit`: every GPU at once, with the all-reduce latency per interconnect family;
- `borrowed`: the factors a GPU without measurements takes from a measured one;
- `calibrate`: the joint fit, the held-out predictions by configuration, the Splitwise check;
- `efficiency_blocks`: the fitted factors as data/gpus.yaml's `efficiency:` blocks.
`bench/calibration.py` runs it and prints every row; `--write` rewrites data/gpus.yaml.

What is predicted, per source
-----------------------------
- TensorRT-LLM offline maximum throughput (`trtllm_offline_throughput.csv`, output
  tokens/s per GPU; every request has the same ISL and OSL). The row becomes a
  Deployment on the `trtllm-offline` engine profile (data/engines.yaml: 0.95 of the
  memory free after weights, blocks of 32, up to 4,096 sequences) with
  max_model_len = ISL + OSL, and `capacity.replica_capacity` of
  `Histogram.constant(ISL, OSL)` with no SLO is evaluated in `worst_case` sizing:
  TensorRT-LLM's default admission policy, GUARANTEED_NO_EVICT, admits a request
  only when blocks for its whole ISL + OSL are free, so the resident count is the
  budget over ISL + OSL tokens, as in worst_case sizing at that limit. (`expected`
  sizing would credit the engine with about twice the batch it runs on long
  outputs.) Prediction = λ(N) x mean output tokens / tp, with λ(N) =
  `capacity.ReplicaModel.rate` at N = `Capacity.bound_batch`, the resident count where
  memory or the engine's sequence cap binds, a closed loop (seen = N: every slot full, the
  request among them): an offline benchmark runs at its full batch, not at the knee the
  planner plans at. Weights in the row's dtype, the KV cache in fp8 for
  fp8 and fp4 checkpoints (NVIDIA's ModelOpt fp4 checkpoints quantise the cache to fp8)
  and fp16 otherwise.
- Splitwise-sim's perf model (`splitwise_perf_model_summary.csv`, Llama 2 70B and
  BLOOM 176B in fp16 on DGX-A100/H100, a research stack): prefill_ms is one forward
  pass over `batch` prompts of `input_len` tokens, i.e. `StepModel.decode_step_s`'s phases over
  batch x input_len tokens with no cache read, attending over batch x input_len^2 / 2 pairs (these
  models attend fully on every layer) (`StepModel.prompt_pass_s`: the FLOPs of `StepModel.prefill_s`, plus the weight read,
  overhead and all-reduce latency a standalone pass pays); decode_ms_per_step is
  `decode_step_s` at `batch` sequences whose mean cached context is
  input_len + (output_len + 1) / 2. The power-capped H100 rows are skipped. Prefill comes
  only from rows whose end-to-end time is consistent (`e2e_consistent_10pct`); decode from
  all rows.
- Latency points (`latency_published.csv`): per-token latency at low and mid concurrency,
  predicted by planner.latency_points.

Fit and hold-out
----------------
- Latency points show the fixed per-step overhead and the per-call all-reduce latency;
  offline maximum-throughput batches hide both (2 ms of overhead and 1% of bandwidth are
  indistinguishable there), which is how the old throughput-only fit reached 77-100 us per
  all-reduce and overstated tp > 1 latency by 36-66%.
- joint_fit.fit_joint: block-coordinate least squares of log(predicted / measured), ROUNDS
  rounds of (1) bandwidth, compute and `interconnect` per GPU on the throughput rows, then (2)
  step_overhead_ms per GPU, allreduce_latency_us per interconnect FAMILY (one number
  for every GPU on NVLink4, one for NVLink3, ...; the latency of one call at tp 2, log2(tp)
  times it at larger tp: roofline.allreduce_call_latency) and one layer_overhead_us for every GPU
  on the latency rows, each family's within its published small-message range
  (joint_fit.small_latency_bounds); between (1) and (2), one straggler_cv for every GPU on the
  tensor-parallel rows, throughput and latency weighed alike (roofline.straggler_factor: the ranks'
  wait for the slowest at each all-reduce, the cost of tensor parallelism that is not the
  collective; it stretches a decode pass's memory reads and weight GEMMs, not prompts' FLOPs). The large-message
  all-reduce protocol (roofline.allreduce_call_s takes the faster of the two per message: the
  small-message one moves bytes at half the link rate, the large-message one at the full rate, as
  NCCL's LL and Simple protocols do) is not fitted: its fixed cost per family and GPU count is the
  intercept of published nccl-tests curves (joint_fit.published_bulk_by_tp), and their bus
  bandwidth centres a prior on the interconnect factor (joint_fit.LINK_PRIOR_SD). A family without
  a curve takes its ALLREDUCE_DONOR's or keeps one protocol. B200 and GB200 share one bandwidth, compute and interconnect
  (joint_fit.SHARED_FIT: the same die, the datasheet peaks carry the difference). The
  physical form is the same for every GPU (roofline.StepModel); nothing is fitted per row.
  A family without latency rows takes ALLREDUCE_DONOR's value, kept within its own published
  range, or, failing one, is fitted on the throughput rows within that range (and says so); the
  ranges are the cited figures of data/measured/allreduce_small_published.csv
  (joint_fit.published_small_allreduce). Every fit starts from
  NEUTRAL, not from the catalog.
- Hold-out is by configuration (calibrate.config_folds, cross_validate): each (model, GPU, tp)
  of either source is predicted by a fit that never saw it. The headline leaves one
  configuration out at a time (FOLDS = 0): the catalog is fitted on every configuration and
  used for ones it has not seen, which is what this measures. A harsher check withholds a
  quarter of the configurations at once (KFOLD); dealt round-robin over the sorted list, a
  fold can hold every tp-1 configuration of a GPU, so it also measures extrapolating a GPU
  from its tensor-parallel rows alone. The catalog takes the fit on every row.
- Latency rows of an engine outside calibrate.FITTED_LATENCY_ENGINES (vLLM, TensorRT-LLM), today
  the SGLang DeepSeek-R1 rows, are fitted on by nothing: the step overhead is one number per GPU,
  and a third engine's fixed costs would move the overhead the other engines' rows on that GPU
  are predicted with. They are predicted with the joint factors and counted as held out.
- Latency rows of a GPU without throughput rows (the MI300X) are fitted on by nothing: one
  configuration cannot separate bandwidth from fixed costs. They check the factors that GPU
  borrows (Calibration.borrowed_check), and its catalog source says by how much they miss.
- Splitwise rows are predicted with the joint factors as a cross-engine check, and fitted
  on their own (every third row held out) only to test the model's form: that research
  stack pays about 25 ms per step at tp 4 and tp 8 alike, far above production engines.
- The all-reduce latencies are checked against published nccl-tests curves (allreduce_published:
  data/measured/nccl_allreduce_published.csv): the large-message one is each curve's alpha-beta
  intercept from 1 MiB to its bus-bandwidth plateau (inside the range by construction), the
  small-message one is compared with NCCL's time up to 16 KiB. bench/calibration.py --compare-forms
  prints the held-out error without the straggler term.
- GPUs without measurements borrow a measured GPU's factors (borrowed.BORROWED) and are marked
  `borrowed_from` (GPU.verified is False): plans that use them say so.
"""
