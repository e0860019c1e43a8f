"""The catalogs, the parameter-count formulas, `planner catalog ...` and import-hf."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from clirun import run
from scenario_files import config_variant

from planner.deployment import make_deployment
from planner.errors import InputError
from planner.hf_import import model_from_hf_config
from planner.params.blocks import DecoderShape, ParamCount
from planner.params.dense import dense_decoder_params, gemma2_params
from planner.params.moe import deepseek_mla_moe_params, moe_decoder_params

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

GPU_IDS = [
    "h100-sxm", "h100-pcie", "h200", "b200", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g", "mi300x",
    "b300", "gb200", "mi325x", "rtx-pro-6000",
]
AMPERE = ["a100-80gb", "a100-40gb", "a10g"]
MODEL_IDS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.2-3b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-72b",
    "qwen3-32b",
    "gemma-2-27b",
    "deepseek-v3",
]
# Added from the real configs in tests/data/hf_configs/ (their counts are checked in test_hf_configs.py).
CURRENT_MODEL_IDS = [
    "llama-4-scout", "llama-4-maverick", "gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b",
    "qwen3-235b-a22b", "qwen3-next-80b", "deepseek-r1", "kimi-k2", "glm-4.7",
]




# --- catalog contents -------------------------------------------------------------------


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_every_gpu_loads_with_a_sourced_price(catalog, gpu_id):
    gpu = catalog.gpu(gpu_id)
    assert gpu.price_usd_per_hour > 0
    assert "third-party" in gpu.price_source
    assert "bench/calibration.py" in gpu.efficiency.source
    assert "/" + "work/" not in gpu.model_dump_json()


@pytest.mark.parametrize("model_id", MODEL_IDS + CURRENT_MODEL_IDS)
def test_every_model_loads(catalog, model_id):
    model = catalog.model(model_id)
    assert model.config_source.startswith("https://")
    assert model.params_source


def test_h100_memory_is_what_nvidia_smi_reports(catalog):
    assert catalog.gpu("h100-sxm").memory_gib == 79.65  # 81559 MiB / 1024


@pytest.mark.parametrize(
    ("gpu_id", "gib"),
    [("h200", 140.40), ("b200", 179.06), ("a100-80gb", 80.00), ("l40s", 44.99), ("mi300x", 191.69),
     ("b300", 268.59), ("gb200", 185.03), ("mi325x", 255.98), ("rtx-pro-6000", 95.59)],
)
def test_memory_is_runtime_gib(catalog, gpu_id, gib):
    assert catalog.gpu(gpu_id).memory_gib == gib


@pytest.mark.parametrize("gpu_id", AMPERE)
def test_ampere_rejects_fp8(catalog, gpu_id):
    gpu = catalog.gpu(gpu_id)
    assert "fp8" not in gpu.weight_dtypes
    assert "fp8" not in gpu.kv_dtypes
    with pytest.raises(InputError, match=f"GPU '{gpu_id}' has no dense fp8 rate"):
        gpu.tflops("fp8")


def test_dtype_support_is_consistent(catalog):
    for gpu in catalog.gpus.values():
        for d in gpu.weight_dtypes:
            dtype = catalog.dtype(d)
            assert dtype.weight
            assert dtype.compute_dtype in gpu.dense_tflops, (gpu.id, d)
        assert set(gpu.kv_dtypes) <= {"bf16", "fp16", "fp8"}
        assert "int4" in gpu.weight_dtypes
        assert ("fp8" in gpu.weight_dtypes) == (gpu.arch != "ampere") == ("fp8" in gpu.kv_dtypes)
        assert ("fp4" in gpu.weight_dtypes) == (gpu.arch == "blackwell") == ("fp4" in gpu.dense_tflops)


def test_interconnect_is_one_direction(catalog):
    assert catalog.gpu("h100-sxm").interconnect_gb_s == 450  # NVLink4 900 both ways
    assert catalog.gpu("b200").interconnect_gb_s == 900  # NVLink5 1800
    assert catalog.gpu("l40s").interconnect_gb_s == 32  # PCIe Gen4 x16


def test_a_tensor_parallel_group_on_a_mesh_drives_only_its_own_links(catalog):
    """An MI300X board joins each pair of its 8 GPUs by one xGMI link (64 GB/s one way), with no
    switch: a group of tp GPUs drives tp - 1 links. The catalog's 448 GB/s, seven links, held at every
    tp and priced a tp-4 group's all-reduces at 2.3 times their rate (an outside audit: the 70B
    enterprise pool's capacity 1.232 requests/s a replica where 0.811 is the model's at 192 GB/s).
    Behind NVSwitch every GPU has its full rate at any tp."""
    from planner.deployment import make_deployment
    from planner.roofline import StepModel

    for gpu in ("mi300x", "mi325x"):
        assert [catalog.gpu(gpu).scale_up_gb_s(tp) for tp in (2, 4, 8)] == [64, 192, 448]
    assert {catalog.gpu("h100-sxm").scale_up_gb_s(tp) for tp in (2, 4, 8)} == {450}
    mi300x, model = catalog.gpu("mi300x"), catalog.model("llama-3.1-70b")
    step = StepModel.of(make_deployment(catalog, model="llama-3.1-70b", gpu="mi300x", tp=4, weight_dtype="fp8",
                                        max_model_len=8192))
    assert step.interconnect_bytes_s == 192e9 * mi300x.efficiency.interconnect
    tokens = 8192
    ring = 2 * 3 / 4 * tokens * model.hidden_size * 2 / step.interconnect_bytes_s  # bf16 activations
    assert step.allreduce_s(tokens, with_latency=False) == pytest.approx(2 * model.num_hidden_layers * ring)


def test_unknown_gpu_lists_the_closest_match(catalog):
    with pytest.raises(InputError, match=r"unknown GPU 'h100-sxm5'; did you mean 'h100-sxm'\?"):
        catalog.gpu("h100-sxm5")


# --- parameter counts -------------------------------------------------------------------

# Config fields (models.csv) per model, and models.csv params_total/active_computed_B.
LLAMA = {"vocab_size": 128256}
DENSE_CONFIGS = {
    "llama-3.1-8b": ({**LLAMA, "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336}, 8.03),
    "llama-3.1-70b": ({**LLAMA, "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 28672}, 70.55),
    "llama-3.1-405b": ({**LLAMA, "num_hidden_layers": 126, "hidden_size": 16384, "num_attention_heads": 128, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 53248}, 405.85),
    "llama-3.2-3b": ({**LLAMA, "num_hidden_layers": 28, "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "tie_word_embeddings": True}, 3.21),
    "llama-3.2-1b": ({**LLAMA, "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "tie_word_embeddings": True}, 1.24),
    "mistral-7b": ({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 32768}, 7.25),
    "qwen2.5-7b": ({"num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 18944, "vocab_size": 152064, "qkv_bias": True}, 7.62),
    "qwen2.5-32b": ({"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 27648, "vocab_size": 152064, "qkv_bias": True}, 32.76),
    "qwen2.5-72b": ({"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 29568, "vocab_size": 152064, "qkv_bias": True}, 72.71),
    "qwen3-8b": ({"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "qk_norm": True}, 8.19),
    "qwen3-32b": ({"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936, "qk_norm": True}, 32.76),
}
GEMMA2_CONFIGS = {
    "gemma-2-27b": ({"num_hidden_layers": 46, "hidden_size": 4608, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 36864, "vocab_size": 256000}, 27.23),
    "gemma-2-9b": ({"num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000}, 9.24),
}
MOE_CONFIGS = {
    "mixtral-8x7b": ({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "moe_intermediate_size": 14336, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}, 46.70, 12.88),
    "mixtral-8x22b": ({"num_hidden_layers": 56, "hidden_size": 6144, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "moe_intermediate_size": 16384, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}, 140.62, 39.15),
    "qwen3-235b-a22b": ({"num_hidden_layers": 94, "hidden_size": 4096, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "qk_norm": True}, 235.09, 22.19),
}
MLA = {"num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
MLA_CONFIGS = {
    "deepseek-v3": ({**MLA, "num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 129280}, 671.03, 37.55),
    "deepseek-v2": ({**MLA, "num_hidden_layers": 60, "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 160, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "vocab_size": 102400, "router_bias": False}, 235.74, 21.38),
}


def _on_shape(formula, cfg: dict) -> ParamCount:
    """A grouped-query formula on config fields: the decoder's shape, the rest as keywords."""
    shape = DecoderShape.of(cfg)
    return formula(shape, **{k: v for k, v in cfg.items() if k not in vars(shape)})


def _computed() -> dict[str, tuple[ParamCount, float, float]]:
    out = {}
    for name, (cfg, b) in DENSE_CONFIGS.items():
        out[name] = (_on_shape(dense_decoder_params, cfg), b, b)
    for name, (cfg, b) in GEMMA2_CONFIGS.items():
        out[name] = (_on_shape(gemma2_params, cfg), b, b)
    for name, (cfg, b, a) in MOE_CONFIGS.items():
        out[name] = (_on_shape(moe_decoder_params, cfg), b, a)
    for name, (cfg, b, a) in MLA_CONFIGS.items():
        out[name] = (deepseek_mla_moe_params(**cfg), b, a)
    return out


COMPUTED = _computed()


@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_param_counts_match_models_csv_to_two_decimals(name):
    count, total_b, active_b = COMPUTED[name]
    assert abs(count.total / 1e9 - total_b) <= 0.005
    assert abs(count.active / 1e9 - active_b) <= 0.005


def test_llama_counts_are_exact():
    assert COMPUTED["llama-3.1-8b"][0] == (8030261248, 8030261248)
    assert COMPUTED["llama-3.1-70b"][0] == (70553706496, 70553706496)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_catalog_counts_are_the_computed_ones(catalog, model_id):
    model = catalog.model(model_id)
    assert (model.params_total, model.params_active) == COMPUTED[model_id][0]


# --- import-hf ----------------------------------------------------------------------------


def test_import_llama_with_head_dim():
    m = model_from_hf_config(FIXTURES / "llama-3.1-8b.json", name="llama-import")
    assert m.hf_id == "meta-llama/Llama-3.1-8B"  # from _name_or_path
    assert (m.num_hidden_layers, m.num_key_value_heads, m.head_dim) == (32, 8, 128)
    assert (m.params_total, m.params_active) == (8030261248, 8030261248)
    assert m.sliding_window is None
    assert m.attention == "gqa"
    assert "/" not in m.config_source.split("(file ")[1]  # the file's base name, not its path


def test_import_without_head_dim_moe():
    m = model_from_hf_config(FIXTURES / "mixtral-8x7b.json", name="mixtral-import")
    assert m.head_dim == 4096 // 32
    assert m.hf_id == "mixtral-import"  # no _name_or_path in the file
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (8, 2, 14336)
    assert (m.params_total, m.params_active) == (46702792704, 12879925248)
    assert m.sliding_window is None  # "sliding_window": null


def test_import_layer_types_sliding_window():
    m = model_from_hf_config(FIXTURES / "gemma-2-27b.json", name="gemma-import")
    assert (m.sliding_window, m.num_sliding_window_layers) == (4096, 23)
    assert m.head_dim == 128
    assert m.params_total == 27227128320


def _variant(tmp_path: Path, fixture: str, **changes) -> Path:
    return config_variant(tmp_path, FIXTURES / fixture, **changes)


def test_import_gemma2_implicit_alternation(tmp_path):
    m = model_from_hf_config(_variant(tmp_path, "gemma-2-27b.json", layer_types=None), name="g")
    assert (m.sliding_window, m.num_sliding_window_layers) == (4096, 23)


def test_import_mistral_v01_window_on_every_layer_and_the_class_default_kv_heads(tmp_path):
    """An absent num_key_value_heads takes MistralConfig's default, 8 (transformers 4.34.0, as every
    release since: "If it is not specified, will default to 8"); it read as multi-head attention,
    four times the KV bytes. An explicit null is multi-head attention, as transformers reads it."""
    path = _variant(
        tmp_path, "mixtral-8x7b.json", sliding_window=4096, num_key_value_heads=None,
        num_local_experts=None, num_experts_per_tok=None, model_type="mistral",
        architectures=["MistralForCausalLM"],
    )
    m = model_from_hf_config(path, name="m")
    assert (m.sliding_window, m.num_sliding_window_layers) == (4096, 32)
    assert (m.num_attention_heads, m.num_key_value_heads) == (32, 8)
    assert m.num_experts is None
    raw = json.loads(path.read_text())
    raw["num_key_value_heads"] = None
    path.write_text(json.dumps(raw))
    m = model_from_hf_config(path, name="m")
    assert m.num_key_value_heads == m.num_attention_heads == 32
    assert "num_key_value_heads is null: num_attention_heads (32), multi-head attention" in m.notes


def test_import_qwen_use_sliding_window_false(tmp_path):
    path = _variant(
        tmp_path, "llama-3.1-8b.json", model_type="qwen2", architectures=["Qwen2ForCausalLM"],
        sliding_window=131072, use_sliding_window=False,
    )
    m = model_from_hf_config(path, name="q")
    assert m.sliding_window is None
    # Qwen2 biases q, k, v: heads*hd + 2*kv_heads*hd per layer more than Llama.
    assert m.params_total == 8030261248 + 32 * (32 * 128 + 2 * 8 * 128)


def test_import_mla():
    m = model_from_hf_config(FIXTURES / "deepseek-v3.json", name="dsv3-import")
    assert m.attention == "mla"
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.head_dim, m.v_head_dim) == (512, 64, 192, 128)
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (256, 8, 2048)
    assert (m.params_total, m.params_active) == (671026419200, 37552297472)


def test_latent_attention_states_the_width_of_its_values(catalog):
    """Prefill attends over values decompressed to v_head_dim (roofline.prefill_attention_flops_per_pair_per_layer):
    a latent-attention model without it is refused, and so is it on a model without latent attention."""
    from pydantic import ValidationError

    from planner.catalog import Model

    mla = catalog.model("deepseek-v3").model_dump(exclude={"v_head_dim"})
    with pytest.raises(ValidationError, match="latent attention needs v_head_dim"):
        Model.model_validate(mla)
    with pytest.raises(ValidationError, match="v_head_dim is for latent attention"):
        Model.model_validate({**catalog.model("llama-3.1-8b").model_dump(), "v_head_dim": 128})
    with pytest.raises(ValidationError, match="latent attention in sliding-window or chunked layers is not modelled"):
        Model.model_validate({**catalog.model("deepseek-v3").model_dump(), "sliding_window": 4096,
                              "num_sliding_window_layers": 30})


def test_import_matches_the_catalog_entry(catalog):
    imported = model_from_hf_config(FIXTURES / "deepseek-v3.json", name="deepseek-v3")
    keep = {"id", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings", "kv_lora_rank",
            "qk_rope_head_dim", "v_head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "params_total", "params_active", "architecture", "sliding_window"}
    assert imported.model_dump(include=keep) == catalog.model("deepseek-v3").model_dump(include=keep)


def test_import_unknown_family_is_refused_unless_layout_and_counts_are_given(tmp_path):
    path = _variant(tmp_path, "llama-3.1-8b.json", model_type="phi3", architectures=["Phi3ForCausalLM"])
    with pytest.raises(InputError, match=r"model_type: 'phi3' is not a family planner reads \(covered: llama, "):
        model_from_hf_config(path, name="p")
    # A parameter count alone does not say what the layers cache.
    with pytest.raises(InputError, match=re.escape("give --layer-kinds KIND=N,... and --params-total")):
        model_from_hf_config(path, name="p", params_total=3_800_000_000)
    m = model_from_hf_config(path, name="p", params_total=3_800_000_000, layer_kinds={"full_attention": 32})
    assert m.params_total == m.params_active == 3_800_000_000
    assert "--params-total" in m.params_source
    assert "layer kinds given on the command line: full_attention=32" in m.notes


def test_cli_import_hf_round_trips_through_catalog(tmp_path):
    out = tmp_path / "mixtral.yaml"
    result = run("catalog", "import-hf", str(FIXTURES / "mixtral-8x7b.json"), "--name", "my-mixtral",
                 "-o", str(out), "--params-active", "12900000000")
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {out}: model 'my-mixtral' (46.70B parameters)\n"
    assert list(yaml.safe_load(out.read_text())["models"]) == ["my-mixtral"]
    listed = run("catalog", "models", "my-mixtral", "--json", "--catalog", str(out))
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.output)
    assert (entry["params_total"], entry["params_active"]) == (46702792704, 12900000000)


def test_cli_import_hf_prints_yaml():
    result = run("catalog", "import-hf", str(FIXTURES / "gemma-2-27b.json"), "--name", "g27")
    assert result.exit_code == 0, result.output
    entry = yaml.safe_load(result.stdout)["models"]["g27"]
    assert result.stderr == "note: layer kinds: full_attention 23, sliding_attention 23\n"
    assert entry["num_sliding_window_layers"] == 23
    assert "id" not in entry


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hidden_size": 4096,', "line 1 column 22: invalid JSON: Expecting property name enclosed in double quotes"),
        ("[1, 2]", "expected a JSON object of config fields (got list)"),
        (None, "num_hidden_layers: required field is missing"),
        ({"hidden_size": "4096"}, "hidden_size: expected an integer (got '4096')"),
        ({"num_attention_heads": True}, "num_attention_heads: expected an integer (got True)"),
        ({"vocab_size": 0}, "vocab_size: expected an integer >= 1 (got 0)"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings: expected true or false (got 'no')"),
        ({"layer_types": ["full_attention"]}, "layer_types: has 1 entries for num_hidden_layers 32"),
    ],
)
def test_cli_malformed_config_exits_2_naming_the_field(tmp_path, text, message):
    path = tmp_path / "config.json"
    if text is None:
        cfg = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
        del cfg["num_hidden_layers"]
        path.write_text(json.dumps(cfg))
    elif isinstance(text, dict):
        cfg = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
        path.write_text(json.dumps({**cfg, **text}))
    else:
        path.write_text(text)
    result = run("catalog", "import-hf", str(path), "--name", "x")
    assert result.exit_code == 2
    assert result.stderr == f"error: {path}: {message}\n"
    assert result.stdout == ""


def test_cli_missing_config_file(tmp_path):
    result = run("catalog", "import-hf", str(tmp_path / "nope.json"), "--name", "x")
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'nope.json'}: file not found\n"


# --- listing commands ---------------------------------------------------------------------


def test_cli_unknown_gpu_lists_the_closest_match():
    result = run("catalog", "gpus", "h100-sxm5")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown GPU 'h100-sxm5'; did you mean 'h100-sxm'? known: a100-40gb,")
    assert result.stderr.endswith("(list them with `planner catalog gpus`)\n")
    assert len(result.stderr.splitlines()) == 1


def test_cli_catalog_override_changes_a_price(tmp_path):
    override = tmp_path / "prices.yaml"
    override.write_text("gpus:\n  h100-sxm:\n    price_usd_per_hour: 1.85\n    price_source: negotiated\n")
    result = run("catalog", "gpus", "h100-sxm", "--json", "--catalog", str(override))
    assert result.exit_code == 0, result.output
    [gpu] = json.loads(result.output)
    assert (gpu["price_usd_per_hour"], gpu["price_source"]) == (1.85, "negotiated")
    assert gpu["memory_gib"] == 79.65  # other fields kept
    default = json.loads(run("catalog", "gpus", "h100-sxm", "--json").output)
    assert default[0]["price_usd_per_hour"] == 2.99


@pytest.mark.parametrize(("command", "ids"), [("gpus", GPU_IDS), ("models", MODEL_IDS + CURRENT_MODEL_IDS)])
def test_cli_tables_and_json_list_every_entry(command, ids):
    table = run("catalog", command)
    assert table.exit_code == 0
    assert [line.split()[0] for line in table.output.splitlines()[2:]] == ids
    as_json = json.loads(run("catalog", command, "--json").output)
    assert [e["id"] for e in as_json] == ids


def test_cli_dtypes_and_engines():
    dtypes = json.loads(run("catalog", "dtypes", "--json").output)
    assert {d["id"] for d in dtypes} == {"bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "fp4"}
    engines = run("catalog", "engines")
    assert engines.exit_code == 0
    assert "fraction_of_free_after_weights" in engines.output


@pytest.mark.parametrize("command", ["gpus", "models", "dtypes", "engines", "import-hf"])
def test_every_command_has_help_with_an_example(command):
    result = run("catalog", command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.output
    assert f"planner catalog {command}" in result.output


def test_cli_import_hf_rejects_active_above_total():
    path = FIXTURES / "llama-3.1-8b.json"
    result = run("catalog", "import-hf", str(path), "--name", "x", "--params-active", "9000000000")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: params_active 9000000000 exceeds params_total 8030261248 "
        "(check --params-total/--params-active)\n"
    )


def test_the_builtin_catalog_reads_the_same_with_libyaml_and_keeps_the_value_checks():
    from planner.catalog import data_dir
    from planner.yamlio import parse_yaml

    for path in sorted(data_dir().glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert parse_yaml(text, str(path), builtin=True) == parse_yaml(text, str(path))
    with pytest.raises(InputError, match="line 2: invalid YAML: key 'a' appears twice"):
        parse_yaml("a: 1\na: 2\n", "data.yaml", builtin=True)
    with pytest.raises(InputError, match="'036' has a leading zero"):
        parse_yaml("a: 036\n", "data.yaml", builtin=True)


def test_vllm_takes_its_step_limits_from_the_gpu_as_vllm_does(catalog):
    """vLLM's API server picks its token budget and sequence limit by GPU (get_batch_defaults):
    8,192 and 1,024 on a GPU reporting at least 70 GiB that is not an A100, else 2,048 and 256.
    The profiles without such a rule keep one value on every GPU: TensorRT-LLM's BuildConfig
    defaults, 8,192 tokens and 2,048 requests (data/SOURCES.md)."""
    limits = {}
    for gpu in catalog.gpus.values():
        large = gpu.memory_gib >= 70 and "a100" not in gpu.name.lower()
        dep = make_deployment(catalog, model="llama-3.1-8b", gpu=gpu.id)
        limits[gpu.id] = (dep.engine.max_num_batched_tokens, dep.engine.max_num_seqs)
        assert limits[gpu.id] == ((8192, 1024) if large else (2048, 256)), gpu.id
        if gpu.vendor == "NVIDIA":  # (TensorRT-LLM runs on no other: test_an_engine_on_another_vendor_s_gpu_is_refused)
            trt = make_deployment(catalog, model="llama-3.1-8b", gpu=gpu.id, engine="trtllm").engine
            assert (trt.max_num_batched_tokens, trt.max_num_seqs) == (8192, 2048)
    assert limits["h100-sxm"] == limits["h200"] == limits["mi300x"] == (8192, 1024)
    assert limits["a100-80gb"] == limits["a100-40gb"] == limits["l40s"] == limits["l4"] == (2048, 256)


def test_sglang_takes_its_step_budget_from_the_gpu_memory_as_sglang_does(catalog):
    """SGLang 0.5.23 sets chunked_prefill_size by the GPU's memory (memory_hook.py): 2,048 tokens
    below 20 GiB, 4,096 below 60, 8,192 below 160, 16,384 from 160; its request limit's floor,
    2,048, on every GPU (data/SOURCES.md)."""
    expected = {"l4": 4096, "a10g": 4096, "l40s": 4096, "a100-40gb": 4096, "a100-80gb": 8192, "h100-sxm": 8192,
                "h200": 8192, "rtx-pro-6000": 8192, "b200": 16384, "mi300x": 16384, "mi325x": 16384}
    for gpu_id, tokens in expected.items():
        engine = make_deployment(catalog, model="llama-3.1-8b", gpu=gpu_id, engine="sglang").engine
        assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (tokens, 2048), gpu_id


def test_an_override_of_one_step_limit_holds_on_every_gpu_and_the_tiers_keep_the_other(catalog):
    stated = catalog.with_overrides({"engines": {"vllm": {"max_num_batched_tokens": 4096}}}, where="o.yaml")
    for gpu, seqs in (("l40s", 256), ("h100-sxm", 1024)):
        eng = make_deployment(stated, model="llama-3.1-8b", gpu=gpu).engine
        assert (eng.max_num_batched_tokens, eng.max_num_seqs) == (4096, seqs), gpu
    tiers = [{"min_memory_gib": 100, "max_num_seqs": 64}]
    own = catalog.with_overrides({"engines": {"vllm": {"gpu_tiers": tiers}}}, where="o.yaml")
    assert make_deployment(own, model="llama-3.1-8b", gpu="h200").engine.max_num_seqs == 64
    assert make_deployment(own, model="llama-3.1-8b", gpu="h100-sxm").engine.max_num_seqs == 1024


def test_a_price_override_is_sourced_where_it_is_stated_not_by_the_quote_it_replaces(catalog):
    """A negotiated price in a scenario's `catalog:` or a --catalog file kept the catalog's source and
    date, which quote another price: the report's price column could not be traced."""
    h100 = catalog.gpu("h100-sxm")
    cut = catalog.with_overrides({"gpus": {"h100-sxm": {"price_usd_per_hour": 2.10}}}, where="s.yaml: catalog").gpu("h100-sxm")
    assert (cut.price_usd_per_hour, cut.price_source, cut.price_date) == (2.10, "override in s.yaml: catalog", "undated")
    assert cut.model_dump(exclude={"price_usd_per_hour", "price_source", "price_date"}) == h100.model_dump(
        exclude={"price_usd_per_hour", "price_source", "price_date"})
    # the same price restated, or a price with its own source, keeps what it is given
    same = catalog.with_overrides({"gpus": {"h100-sxm": {"price_usd_per_hour": h100.price_usd_per_hour}}}, where="o.yaml")
    assert same.gpu("h100-sxm") == h100
    cited = {"price_usd_per_hour": 2.5, "price_source": "our contract", "price_date": "2026-11"}
    own = catalog.with_overrides({"gpus": {"h100-sxm": cited}}, where="o.yaml").gpu("h100-sxm")
    assert (own.price_usd_per_hour, own.price_source, own.price_date) == (2.5, "our contract", "2026-11")
    # one of the two stated: the other is not the catalog quote's either
    dated = catalog.with_overrides({"gpus": {"h100-sxm": {"price_usd_per_hour": 2.5, "price_date": "2026-11"}}},
                                   where="o.yaml").gpu("h100-sxm")
    assert (dated.price_source, dated.price_date) == ("override in o.yaml", "2026-11")
    sourced = catalog.with_overrides({"gpus": {"h100-sxm": {"price_usd_per_hour": 2.5, "price_source": "our contract"}}},
                                     where="o.yaml").gpu("h100-sxm")
    assert (sourced.price_source, sourced.price_date) == ("our contract", "undated")


def test_cli_engines_lists_the_tiers():
    table = run("catalog", "engines").output
    assert ">= 70 GiB and not named a100: 8192/1024; other GPUs: 2048/256" in table
    [vllm] = [e for e in json.loads(run("catalog", "engines", "--json").output) if e["id"] == "vllm"]
    assert [t["max_num_batched_tokens"] for t in vllm["gpu_tiers"]] == [8192, 2048]


@pytest.mark.parametrize(("engine", "gpu", "limits"), [
    ("vllm-0.20", "l40s", (2048, 256)), ("vllm-0.20", "a100-80gb", (2048, 256)), ("vllm-0.20", "h100-sxm", (8192, 1024)),
    ("vllm-0.20", "b200", (8192, 1024)),
    ("vllm-0.28", "l40s", (2048, 256)), ("vllm-0.28", "a100-80gb", (2048, 256)), ("vllm-0.28", "h200", (8192, 1024)),
    ("vllm-0.28", "b200", (16384, 1024)), ("vllm-0.28", "mi300x", (16384, 1024)),
])
def test_vllm_0_20_on_takes_the_api_server_s_batch_defaults_by_gpu(catalog, engine, gpu, limits):
    """EngineArgs.get_batch_defaults: 2048 tokens and 256 sequences below 70 GiB or on an A100, in
    every release (the vllm-0.20 profile gave every GPU 8192 and 1024); from v0.28, 16384 at >= 160 GiB."""
    e = catalog.engine(engine).for_gpu(catalog.gpu(gpu))
    assert (e.max_num_batched_tokens, e.max_num_seqs) == limits


def test_an_import_under_a_catalog_id_keeps_nothing_of_the_entry_and_an_override_merges(catalog):
    """A config imported under a catalog id (`import-hf --name gemma-2-27b`) is another model: it left
    its unset fields out, and merged field by field it kept Gemma's sliding-window layers, DeepSeek's
    latent attention, gpt-oss's MXFP4 checkpoint (a KV budget 88% too large). The import states every
    field now, unset ones null or 0. An override written by hand merges, whatever it restates: rules
    that replaced the entry on a restated shape, a named source or a whole entry dropped Gemma's
    windows for its own values, and refused DeepSeek's corrected active parameters or a better
    config_source (three readings)."""
    import yaml

    from planner.hf_import import catalog_yaml, model_from_hf_config

    llama = model_from_hf_config(FIXTURES / "llama-3.1-8b.json", name="x")
    for built_in in ("gemma-2-27b", "deepseek-v3", "gpt-oss-20b"):
        entry = yaml.safe_load(catalog_yaml(llama.model_copy(update={"id": built_in})))
        twin = catalog.with_overrides(entry, where="o.yaml").model(built_in)
        assert twin.model_dump(exclude={"id"}) == llama.model_dump(exclude={"id"}), built_in
    gemma = catalog.model("gemma-2-27b")
    restated = {k: v for k, v in gemma.model_dump().items() if type(gemma).model_fields[k].is_required() and k != "id"}
    assert catalog.with_overrides({"models": {"gemma-2-27b": restated}}, where="o.yaml").model("gemma-2-27b") == gemma
    dsv3 = catalog.model("deepseek-v3")
    fixed = catalog.with_overrides({"models": {"deepseek-v3": {"params_active": dsv3.params_active + 1}}},
                                   where="o.yaml").model("deepseek-v3")
    assert (fixed.params_active, fixed.kv_lora_rank, fixed.num_experts) == (dsv3.params_active + 1, 512, 256)
    source = catalog.with_overrides({"models": {"gpt-oss-20b": {"config_source": "https://example.org/config.json"}}},
                                    where="o.yaml")
    assert source.model("gpt-oss-20b").checkpoint_dtype == "mxfp4"
    dropped = catalog.with_overrides({"models": {"gemma-2-27b": {"sliding_window": None, "num_sliding_window_layers": 0}}},
                                     where="o.yaml")
    assert dropped.model("gemma-2-27b").sliding_window is None


def test_a_name_listed_twice_is_listed_once():
    """An outside probe: `catalog models llama-3.1-8b llama-3.1-8b` printed the row twice."""
    twice = json.loads(run("catalog", "models", "llama-3.1-8b", "llama-3.1-8b", "--json").stdout)
    once = json.loads(run("catalog", "models", "llama-3.1-8b", "--json").stdout)
    assert twice == once and len(once) == 1


def test_entries_an_outside_check_found_wrong_against_their_vendors(catalog):
    """rtx-pro-6000, named the Server Edition, had the Workstation Edition's 1,792 GB/s (NVIDIA's Server
    Edition page and datasheet, and AWS's G7e: 1,597); glm-4.7 names the FP8 release but set no
    checkpoint dtype, so `capacity` weighed bf16 weights (657 GiB) and found 8 H100s too small."""
    gpu = catalog.gpu("rtx-pro-6000")
    assert "Server Edition" in gpu.name and gpu.hbm_bandwidth_gb_s == 1597
    model = catalog.model("glm-4.7")
    assert model.hf_id.endswith("-FP8") and model.checkpoint_dtype == "fp8"
    r = run("capacity", "glm-4.7", "h100-sxm", "--tp", "8")
    assert r.exit_code == 0 and "fp8 weights" in r.stdout.splitlines()[0], r.output
