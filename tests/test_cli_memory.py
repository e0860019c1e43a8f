"""`planner kv` and `planner capacity` on the command line: JSON keys, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest
from clirun import run
from golden_files import assert_matches_golden

from planner.catalog import load_catalog


def test_capacity_json_reproduces_53_and_191():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--typical-tokens", "2300", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["worst_case_users"] == 53
    assert out["paged_users"] == 191
    for key in ("gpu_memory_gib", "usable_gib", "weights_gib", "overhead_gib", "kv_budget_gib",
                "kv_bytes_per_token", "kv_gib_per_user", "ridge_point"):
        assert key in out
    assert round(out["ridge_point"]) == 295
    # the levers the text lists (seed 000: fp8 cache 107 users; all three stack), which --json lacked
    levers = {lever["lever"]: lever for lever in out["levers"]}
    assert levers["fp8 KV cache"]["worst_case_users"] == 107 and levers["fp8 KV cache"]["available"]
    assert list(levers) == ["fp8 KV cache", "context limit 4,096", "fp8 weights",
                            "all three (fp8 cache + 4,096 + fp8 weights)"]


def test_capacity_table_walks_the_ladder_and_names_levers():
    """Seed 000's worked example, step by step: 53 users guaranteed, 191 observed; every line exact."""
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--typical-tokens", "2300")
    assert r.exit_code == 0, r.output
    assert_matches_golden("capacity_8b_h100.txt", r.output)


def test_capacity_with_a_class_and_a_rate_prints_every_figure_exactly():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
            "--output-tokens", "200", "--tpot-ms", "50", "--rate-rps", "5", "--engine", "trtllm")
    assert r.exit_code == 0, r.output
    assert_matches_golden("capacity_8b_h100_class_trtllm.txt", r.output)


def test_capacity_says_which_ceilings_lie_past_the_batch_limit():
    """`planner capacity` printed the token budget's ceiling at N = 1,365.33, past max_num_seqs = 1,024,
    at a rate above the batch limit's row, without the note the report gives; --json now lists them."""
    args = ("capacity", "llama-3.1-8b", "h100-sxm", "--prompt-tokens", "1000", "--output-tokens", "200", "--tpot-ms", "50")
    out = json.loads(run(*args, "--json").output)
    past = [k for k, n in out["ceilings_resident_batch"].items() if k != "roofline" and n and n > out["max_num_seqs"]]
    assert past == out["ceilings_past_batch_limit"] == ["token_budget"]
    assert out["ceilings_rps"]["token_budget"] > out["ceilings_rps"]["roofline"]
    text = run(*args).output
    assert (f"  note: token_budget N past max_num_seqs = {out['max_num_seqs']:,}: λ(N) there is the formula's, at a batch "
            "no replica runs; the lowest ceiling binds") in text


def test_kv_json():
    r = run("kv", "llama-3.1-8b", "--tokens", "8192", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kv_bytes_per_token"] == 131072
    assert out["kv_gib_per_request"] == 1.0


def test_unknown_model_exits_2_with_closest_match():
    r = run("capacity", "llama-3.1-8", "h100-sxm")
    assert r.exit_code == 2
    assert "did you mean 'llama-3.1-8b'" in r.output
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_unknown_gpu_lists_known_names():
    r = run("capacity", "llama-3.1-8b", "h1000")
    assert r.exit_code == 2
    assert "unknown GPU 'h1000'" in r.output and "h100-sxm" in r.output


def test_dtype_the_gpu_lacks_exits_2_and_says_why():
    r = run("capacity", "llama-3.1-8b", "a100-80gb", "--kv-dtype", "fp8")
    assert r.exit_code == 2
    assert "does not support an fp8 KV cache" in r.output and "Ampere" in r.output.replace("ampere", "Ampere")


@pytest.mark.parametrize(("args", "said"), [
    (("kv", "llama-3.1-8b", "--kv-dtype", "nvfp4"),
     "Invalid value for --kv-dtype: unknown KV-cache dtype 'nvfp4'; did you mean 'fp8'? known: bf16, fp16, fp8"),
    (("kv", "llama-3.1-8b", "--kv-dtype", "fp4"),
     "Invalid value for --kv-dtype: 'fp4' is not a KV-cache dtype (its catalog entry's `kv` is false); choose from bf16, fp16, fp8"),
    (("capacity", "llama-3.1-8b", "h100-sxm", "--kv-dtype", "int8"),
     "Invalid value for --kv-dtype: 'int8' is not a KV-cache dtype (its catalog entry's `kv` is false); choose from bf16, fp16, fp8"),
    (("capacity", "llama-3.1-8b", "h100-sxm", "--weight-dtype", "fp9"),
     "Invalid value for --weight-dtype: unknown weight dtype 'fp9'; did you mean 'fp8'? known: bf16, fp16, fp4, fp8, "
     "int4, int8, mxfp4"),
])
def test_a_dtype_option_names_only_the_dtypes_its_role_allows(args, said):
    """An outside probe: `kv --kv-dtype nvfp4` suggested 'fp4', which it then refused as no KV-cache dtype;
    `capacity --kv-dtype int8` read "cannot serve as a int8 KV cache" and named no choice."""
    r = run(*args)
    assert r.exit_code == 2 and said in r.output, r.output


def test_weights_that_do_not_fit_exit_2_with_the_numbers():
    r = run("capacity", "llama-3.1-70b", "h100-sxm")
    assert r.exit_code == 2
    assert "do not fit" in r.output and "GiB weights" in r.output and "KV budget" in r.output


@pytest.mark.parametrize(("option", "value", "shown"), [("--overhead-gib", "80", "80.00 GiB overhead"),
                                                       ("--gpu-memory-utilization", "0.1", "x 0.10")])
def test_an_overhead_or_memory_fraction_that_leaves_no_cache_is_blamed_not_the_weights(option, value, shown):
    # it read "bf16 weights do not fit on 1 x h100-sxm" of 14.96 GiB of weights on an 80 GiB GPU
    r = run("capacity", "llama-3.1-8b", "h100-sxm", option, value)
    assert r.exit_code == 2
    assert "'llama-3.1-8b' on 1 x h100-sxm: no memory is left for a KV cache: " in r.output and shown in r.output
    assert "do not fit" not in r.output
    advice = r.output.split("KV budget; ")[1]
    # each setting that can give a cache, and only those: the fraction cannot help 80 GiB of overhead on
    # an 80 GiB GPU, the overhead cannot help weights past a tenth of it
    assert ("raise the memory fraction" in advice) == (option == "--gpu-memory-utilization")
    assert ("lower the overhead" in advice) == (option == "--overhead-gib")


@pytest.mark.parametrize(("args", "arithmetic", "advice"), [
    # TensorRT-LLM's fraction applies to what weights and overhead leave: raising it never helps
    (["l4", "--engine", "trtllm", "--overhead-gib", "8"],
     "(22.49 GiB - 14.96 GiB weights - 8.00 GiB overhead) x 0.90 = -0.42 GiB KV budget",
     "lower the overhead (overhead_gib, --overhead-gib), or try"),
    # SGLang keeps what its fraction leaves for itself: no overhead of the user's is subtracted
    (["l4", "--engine", "sglang", "--gpu-memory-utilization", "0.5"],
     "22.49 GiB x 0.50 = 11.24 GiB for weights and cache - 14.96 GiB weights = -3.71 GiB KV budget",
     "raise the memory fraction (gpu_memory_utilization, --gpu-memory-utilization), or try"),
])
def test_a_deployment_without_a_cache_shows_its_engine_s_arithmetic_and_the_settings_that_help(args, arithmetic,
                                                                                                advice):
    # both printed "22.49 GiB x 0.90 = 22.54 GiB usable - ..." whatever the engine's rule, and advised both settings
    r = run("capacity", "llama-3.1-8b", *args)
    assert r.exit_code == 2
    assert f"no memory is left for a KV cache: {arithmetic}; {advice} more tensor parallelism" in r.output, r.output


def test_capacity_with_a_class_adds_rate_and_binding():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
            "--output-tokens", "200", "--tpot-ms", "40", "--rate-rps", "5", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["max_rps_per_replica"] > 0
    assert out["binding"] == "tpot"
    assert out["latency"]["stat"] == "p99"
    assert out["latency"]["tpot_ms"] <= 40 * (1 + 1e-9)
    assert {"resident_batch", "step_ms", "tokens_per_s"} <= set(out)
    at = out["at_rate"]
    assert at["rate_rps"] == 5 and at["beyond_capacity"] is False
    assert {"resident_batch", "step_ms", "latency", "kv_utilisation", "output_tokens_per_s"} <= set(at)
    assert at["latency"]["tpot_ms"] < out["latency"]["tpot_ms"]


def test_rate_beyond_capacity_is_flagged():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
            "--output-tokens", "200", "--tpot-ms", "40", "--rate-rps", "1000", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["at_rate"]["beyond_capacity"] is True


def test_a_rate_past_the_token_budget_ceiling_is_unstable():
    """Below the roofline but past the token-budget ceiling the prompts queue without end."""
    args = ("capacity", "llama-3.1-8b", "l40s", "--kv-dtype", "fp8", "--context-limit", "8192",
            "--prompt-tokens", "4000", "--output-tokens", "100", "--ttft-s", "10", "--stat", "mean", "--rate-rps", "2.3")
    at = json.loads(run(*args, "--json").output)["at_rate"]
    assert (at["stable"], at["beyond_capacity"]) == (False, True)
    assert at["why"].startswith("the steps' token budget of 2,048 tokens cannot carry the prompts at this rate")
    text = run(*args).output
    assert "at 2.3 requests/s: unstable — the steps' token budget of 2,048 tokens" in text


@pytest.mark.parametrize(("rate", "stable"), [(21.26, True), (21.28, False), (21.45, False)])
def test_a_rate_past_the_memory_ceiling_is_unstable(rate, stable):
    """Past the cache's budget the engine preempts: the replica was said stable there with the cache at
    104-192% and a p99 TTFT that fell 3,500-fold as the load rose (a probe's finding)."""
    args = ("capacity", "llama-3.1-8b", "h100-sxm", "--prompt-tokens", "1000", "--output-tokens", "200",
            "--rate-rps", str(rate))
    out = json.loads(run(*args, "--json").output)
    at = out["at_rate"]
    assert at["stable"] is stable
    assert out["ceilings_rps"]["memory"] == pytest.approx(21.261, abs=5e-4)
    if stable:
        assert at["kv_utilisation"] <= 1.0
    else:
        assert at["why"].endswith("of the KV budget: the engine preempts and recomputes, and no steady state is left "
                                  "to read latencies from (the cache is full on average from 21.261 requests/s)")
        assert f"at {rate:g} requests/s: unstable — its " in run(*args).output


def test_every_command_has_help_with_an_example():
    from planner.cli import main as group

    for name, command in group.commands.items():
        r = run(name, "--help")
        assert r.exit_code == 0, name
        assert "planner " in (command.help or ""), f"{name} help has no example"


def test_capacity_from_a_histogram_file_of_a_real_trace():
    """The shipped Azure conversation trace's histogram file as the traffic class."""
    from pathlib import Path

    hist = Path(__file__).parent.parent / "data" / "samples" / "azure_conv_2023_sample.hist.parquet"
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--histogram", str(hist),
            "--sizing", "percentile", "--itl-ms", "50", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # a note on stderr says how many requests exceed the limit
    assert "1 request(s) exceed the 8,192-token limit" in r.stderr
    assert out["sizing"] == "percentile"
    assert out["concurrency"]["worst_case"] <= out["concurrency"]["percentile"] <= out["concurrency"]["expected"]
    assert out["max_rps_per_replica"] > 0
    assert out["itl_ms"] <= 50 * (1 + 1e-6)


def test_capacity_histogram_that_is_not_a_histogram_file_exits_2(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet", encoding="utf-8")
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", str(bad))
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_a_name_typed_as_a_prefix_suggests_the_full_name():
    """Of the names that start the way it was typed, the first in sorted order (errors.did_you_mean)."""
    r = run("capacity", "llama-3.1-8b", "h100")
    assert r.exit_code == 2
    known = ", ".join(sorted(load_catalog().gpus))
    assert r.stderr == (
        f"error: unknown GPU 'h100'; did you mean 'h100-sxm'? known: {known} (list them with `planner catalog gpus`)\n"
    )


def test_a_name_typed_in_another_case_suggests_itself_before_a_neighbour():
    """'BF16' is 'bf16' in capitals, one edit from 'fp16': the suggestion was 'fp16'. 'H100' then
    starts as 'h100-pcie' does, whatever the case."""
    r = run("kv", "llama-3.1-8b", "--kv-dtype", "BF16")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: Invalid value for --kv-dtype: unknown KV-cache dtype 'BF16'; did you mean 'bf16'? "
                               "known: ")
    r = run("capacity", "llama-3.1-8b", "H100")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: unknown GPU 'H100'; did you mean 'h100-sxm'? known: ")


def test_a_class_of_one_output_token_has_no_tpot_rather_than_a_tpot_of_zero():
    """TPOT is (last token - first token) / (output tokens - 1): undefined for one token. It read
    0.00 ms, and the TPOT target read as met with room to spare."""
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
            "--output-tokens", "1", "--tpot-ms", "10", "--rate", "5")
    assert r.exit_code == 0, r.output
    assert "TPOT n/a (no request has a second output token)" in r.output
    assert "p99 TPOT n/a (no request has a second output token)" in r.output
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
            "--output-tokens", "1", "--tpot-ms", "10", "--json")
    assert json.loads(r.output)["latency"]["tpot_ms"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--tp", "64"], "Invalid value for --tp: tensor-parallel degree 64 does not divide the 32 attention heads of "
                     "'llama-3.1-8b'"),
    (["--tokens", "200000"], "Invalid value for --tokens: 200,000 exceeds the 131,072 tokens 'llama-3.1-8b' takes "
                             "(max_position_embeddings)"),
])
def test_kv_refuses_what_capacity_refuses_for_the_same_model(args, message):
    r = run("kv", "llama-3.1-8b", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1
    if args[0] == "--tokens":  # capacity says it of its own option (it named vLLM's max_model_len, no option of it)
        r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", args[1])
        assert r.exit_code == 2, r.output
        assert message.replace("--tokens", "--context-limit") in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--tp", "1024"], "Invalid value for --tp: tensor-parallel degree 1024 exceeds the 8 GPUs of one 'h100-sxm' node"),
    (["--weight-dtype", "fp4"], "Invalid value for --weight-dtype: GPU 'h100-sxm' does not support fp4 weights"),
])
def test_capacity_names_the_option_a_combination_is_refused_for(args, message):
    """It said only why, naming no option (an outside probe); `kv --tp` names its own."""
    r = run("capacity", "llama-3.1-8b", "h100-sxm", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1


def test_capacity_refuses_a_quantile_its_sizing_does_not_read_as_a_scenario_does():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--prompt-tokens", "100", "--output-tokens", "10",
            "--sizing", "worst_case", "--quantile", "0.7")
    assert r.exit_code == 2, r.output
    assert "Invalid value for --quantile: is read only with --sizing percentile (sizing is worst_case)" in r.output


def test_kv_json_gives_each_gpu_s_bytes_as_the_text_does_and_whole_bytes_as_integers():
    """An outside probe: the text said "131,072 bytes ... over the 16 GPUs, 8,192 on each" and --json had
    no per-GPU figure; each layer kind's bytes read 131072.0 beside an integer total."""
    r = run("kv", "llama-3.1-8b", "--kv-dtype", "fp8", "--tp", "16", "--tokens", "1000", "--json")
    payload = json.loads(r.stdout)
    assert payload["kv_bytes_per_token"] == 131072 and payload["kv_bytes_per_token_per_gpu"] == 8192
    assert "over the 16 GPUs, 8,192 on each" in run("kv", "llama-3.1-8b", "--kv-dtype", "fp8", "--tp", "16").stdout
    [kind] = payload["kv_layer_kinds"]
    assert kind["bytes_per_token"] == 131072 and isinstance(kind["bytes_per_token"], int)


def test_capacity_names_the_ceiling_its_rate_is_planned_below_where_binding_names_a_resource():
    """An outside probe: `binding: compute` (throughput saturates below the bound) is no key of
    ceilings_rps, and the rate, 99% of the memory ceiling, said which ceiling nowhere a program reads."""
    args = ("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--sizing", "percentile",
            "--quantile", "0.5", "--prompt-tokens", "1000", "--output-tokens", "200")
    payload = json.loads(run(*args, "--json").stdout)
    assert payload["binding"] == "compute" and payload["planned_below"] == "memory"
    below = payload["ceilings_rps"]["memory"]
    assert payload["max_rps_per_replica"] == pytest.approx(0.99 * below, rel=1e-6)
    assert f"of the memory ceiling's {below:.3f} requests/s" in run(*args).stdout
    plain = json.loads(run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", "8192", "--prompt-tokens", "1000",
                           "--output-tokens", "200", "--tpot-ms", "20", "--json").stdout)
    assert plain["planned_below"] == plain["binding"]  # where a ceiling binds, the same name
