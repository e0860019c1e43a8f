"""Real Hugging Face configs (tests/data/hf_configs/, sources in its README.md): for each, the
KV bytes per token of every layer kind and the parameter count against an independent
reference (the model card or the checkpoint's safetensors index), or the refusal naming the field.

The expected cache figures are written out from the model cards' numbers (layers, KV heads,
head width, window), not computed by planner; the parameter references are the cards' rounded
figures (checked at the card's precision) or an index's metadata.total_size (checked exactly).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from clirun import run
from scenario_files import config_variant

from planner.catalog import load_catalog
from planner.checkpoint import read_weights
from planner.errors import InputError
from planner.hf_import import model_from_hf_config
from planner.memory import (
    kv_bytes_for_tokens,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_by_layer_kind,
)

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
BF16 = load_catalog().dtype("bf16")


def _kv(layers: int, kv_heads: int, head_dim: int) -> int:
    """K and V, kv_heads x head_dim each, 2 bytes (bf16), over `layers` layers: seed 000's formula."""
    return layers * 2 * kv_heads * head_dim * 2


# file -> {kind: (layers, bf16 bytes per token, token cap)}, fixed state per sequence (bytes)
# Layer counts, heads and widths are the model cards' (README.md cites each).
KV = {
    "llama-3.1-8b": ({"full_attention": (32, _kv(32, 8, 128), None)}, 0),
    "mixtral-8x7b-v0.1": ({"full_attention": (32, _kv(32, 8, 128), None)}, 0),
    "wizardlm-2-8x22b": ({"full_attention": (56, _kv(56, 8, 128), None)}, 0),
    "devstral-small-2507": ({"full_attention": (40, _kv(40, 8, 128), None)}, 0),
    "cogito-v1-preview-qwen-14b": ({"full_attention": (48, _kv(48, 8, 128), None)}, 0),
    "qwen3-8b": ({"full_attention": (36, _kv(36, 8, 128), None)}, 0),
    "qwen3-32b-fp8": ({"full_attention": (64, _kv(64, 8, 128), None)}, 0),
    "qwen3-30b-a3b": ({"full_attention": (48, _kv(48, 4, 128), None)}, 0),
    "qwen3-235b-a22b": ({"full_attention": (94, _kv(94, 4, 128), None)}, 0),
    "qwen3-vl-8b-instruct": ({"full_attention": (36, _kv(36, 8, 128), None)}, 0),
    "granite-3.1-1b-a400m-instruct": ({"full_attention": (24, _kv(24, 8, 64), None)}, 0),
    "glm-4.7-fp8": ({"full_attention": (92, _kv(92, 8, 128), None)}, 0),
    # Gemma 2: local (4,096) and global layers alternate; Gemma 3: five local (1,024) per global.
    "gemma-2-27b-it": ({"full_attention": (23, _kv(23, 16, 128), None),
                        "sliding_attention": (23, _kv(23, 16, 128), 4096)}, 0),
    "medgemma-27b-it": ({"full_attention": (10, _kv(10, 16, 128), None),
                         "sliding_attention": (52, _kv(52, 16, 128), 1024)}, 0),
    # gpt-oss: banded-window (128) and dense layers alternate; 8 KV heads of 64.
    "gpt-oss-20b": ({"full_attention": (12, _kv(12, 8, 64), None), "sliding_attention": (12, _kv(12, 8, 64), 128)}, 0),
    "gpt-oss-120b": ({"full_attention": (18, _kv(18, 8, 64), None), "sliding_attention": (18, _kv(18, 8, 64), 128)}, 0),
    # Llama 4 (iRoPE): 3 of 4 layers attend within 8,192-token chunks, every 4th (NoPE) globally.
    "llama-4-scout-17b-16e-instruct": ({"full_attention": (12, _kv(12, 8, 128), None),
                                        "chunked_attention": (36, _kv(36, 8, 128), 8192)}, 0),
    "llama-4-maverick-17b-128e-instruct": ({"full_attention": (12, _kv(12, 8, 128), None),
                                            "chunked_attention": (36, _kv(36, 8, 128), 8192)}, 0),
    # MLA: kv_lora_rank 512 + rope 64 = 576 values per layer, no factor 2.
    "deepseek-r1": ({"latent_attention": (61, 61 * 576 * 2, None)}, 0),
    "kimi-k2-instruct": ({"latent_attention": (61, 61 * 576 * 2, None)}, 0),
    # Qwen3-Next: 12 x (3 Gated DeltaNet + 1 gated attention); attention 2 KV heads of 256.
    # DeltaNet state per layer (vLLM gated_delta_net_state_shape), bf16: conv (2*16*128 + 32*128) x 3
    # plus recurrent 32 x 128 x 128 values.
    "qwen3-next-80b-a3b-thinking": ({"full_attention": (12, _kv(12, 2, 256), None), "linear_attention": (36, 0, None)},
                                    36 * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 2),
    # Qwen3.5: recurrent state in float32 (the config's mamba_ssm_dtype), conv state bf16.
    "qwen3.5-27b": ({"full_attention": (16, _kv(16, 4, 256), None), "linear_attention": (48, 0, None)},
                    48 * ((2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4)),
    "qwen3.5-35b-a3b": ({"full_attention": (10, _kv(10, 2, 256), None), "linear_attention": (30, 0, None)},
                        30 * ((2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)),
}

B = 10**9
# file -> (total, active, tolerance in parameters): the card's figure at the card's precision.
# "index": exact, from the file's model.safetensors.index.json (total_size / 2 bytes per bf16 weight).
CARD = {
    "llama-3.1-8b": (8_030_261_248, 8_030_261_248, 0),  # seed 000 "8.03 billion"; models.csv, exact
    "mixtral-8x7b-v0.1": (46.7 * B, 12.9 * B, 0.05 * B),
    "qwen3-8b": (8.2 * B, 8.2 * B, 0.05 * B),
    "qwen3-32b-fp8": (32.8 * B, 32.8 * B, 0.05 * B),
    "qwen3-30b-a3b": (30.5 * B, 3.3 * B, 0.06 * B),  # the card truncates: 3.35B active reads "3.3B"
    "qwen3-235b-a22b": (235 * B, 22 * B, 0.5 * B),
    "qwen3-vl-8b-instruct": (8.2 * B, 8.2 * B, 0.05 * B),  # its language model is Qwen3-8B's (vision not counted)
    "qwen3.5-27b": (27 * B, 27 * B, 0.5 * B),
    "qwen3.5-35b-a3b": (35 * B, 3.5 * B, 0.5 * B),
    "granite-3.1-1b-a400m-instruct": (1.3 * B, 0.4 * B, 0.05 * B),
    "llama-4-maverick-17b-128e-instruct": (400 * B, 17 * B, B),
    "deepseek-r1": (671 * B, 37 * B, 0.6 * B),
    "kimi-k2-instruct": (1026 * B, 32 * B, B),  # card: "1T" total; 1.03T to the billion
    "gemma-2-27b-it": (27.23 * B, 27.23 * B, 0.005 * B),  # models.csv
}
INDEX = {
    "wizardlm-2-8x22b": 281_241_268_224,
    "devstral-small-2507": 47_144_806_400,
    "cogito-v1-preview-qwen-14b": 29_531_895_808,
    "medgemma-27b-it": 54_864_813_280,
}


def _import(name: str, **kwargs):
    return model_from_hf_config(CONFIGS / f"{name}.json", name=name, **kwargs)


@pytest.mark.parametrize("name", sorted(KV))
def test_kv_bytes_per_token_by_layer_kind(name):
    kinds, state = KV[name]
    model = _import(name, **({"params_total": 56 * B} if name.startswith("nemotron") else {}))
    layout = kv_bytes_per_token_by_layer_kind(model, BF16)
    assert {k.kind: (k.layers, k.bytes_per_token, k.token_cap) for k in layout.kinds} == kinds
    assert layout.state_bytes_per_sequence == state
    # Bytes per token cover the layers that cache tokens, whatever their cap.
    assert kv_bytes_per_token(model, BF16) == sum(b for _, b, _ in kinds.values())


@pytest.mark.parametrize("name", sorted(CARD))
def test_parameter_count_against_the_model_card(name):
    total, active, tol = CARD[name]
    model = _import(name)
    assert abs(model.params_total - total) <= tol
    assert abs(model.params_active - active) <= tol


@pytest.mark.parametrize("name", sorted(INDEX))
def test_parameter_count_against_the_safetensors_index(name):
    """metadata.total_size is bytes: a bf16 checkpoint holds total_size / 2 weights."""
    index = CONFIGS / f"{name}.safetensors.index.json"
    assert json.loads(index.read_text())["metadata"]["total_size"] == INDEX[name]
    exact = _import(name, weights=index)
    assert exact.params_total == INDEX[name] // 2
    assert exact.checkpoint_weight_bytes == INDEX[name]
    assert exact.params_source.startswith(f"exact: metadata.total_size of {index.name}")
    formula = _import(name)
    if name == "medgemma-27b-it":
        # The formula counts the language model; the index holds the SigLIP tower and projector too.
        assert formula.params_total == 27_009_346_304
        assert exact.params_total - formula.params_total == 423_060_336
        assert "the vision tower is not counted" in formula.notes
        # The tower's weights are loaded; a text token runs through the language model alone.
        assert exact.params_active == formula.params_active == 27_009_346_304
        assert "(active: the language model by planner.params (gemma3), 27,009,346,304; the vision tower computes no text token)" in exact.params_source
    else:
        assert formula.params_total == exact.params_total  # the formula is exact for these families


def test_gpt_oss_mxfp4_checkpoint_bytes_match_the_index_exactly():
    """Routed experts in MXFP4 (17 bytes per 32 weights), the rest bf16: gpt-oss-20b's index total."""
    index = json.loads((CONFIGS / "gpt-oss-20b.safetensors.index.json").read_text())
    model = _import("gpt-oss-20b")
    assert model.checkpoint_dtype == "mxfp4"
    assert model.checkpoint_weight_bytes == index["metadata"]["total_size"] == 13_761_264_768


@pytest.mark.parametrize(("name", "card_total", "card_active"), [("gpt-oss-20b", 20.9, 3.6), ("gpt-oss-120b", 116.8, 5.1)])
def test_gpt_oss_counts_against_the_model_card(name, card_total, card_active):
    """OpenAI's card (arXiv 2508.10925) counts the unembedding but not the embedding as active;
    planner counts both (models.yaml convention), so the card's active is planner's less one
    embedding table (201,088 x 2,880)."""
    model = _import(name)
    assert round(model.params_total / B, 1) == card_total
    assert round((model.params_active - 201_088 * 2880) / B, 1) == card_active


def test_qwen3_next_caches_its_full_attention_layers_only_plus_a_fixed_state():
    model = _import("qwen3-next-80b-a3b-thinking")
    per_token = 12 * 2 * 2 * 256 * 2  # the 12 gated-attention layers; all 48 would be 4x
    state = 36 * 1_097_728
    assert kv_bytes_per_token(model, BF16) == per_token == 24_576
    assert kv_bytes_for_tokens(model, 100_000, BF16) == per_token * 100_000
    assert kv_bytes_per_sequence(model, 100_000, BF16) == per_token * 100_000 + state
    # The card: 80B total, 79B without the embeddings, 3B activated (without them too).
    embeddings = 2 * 151_936 * 2048
    assert round(model.params_total / B) == 80
    assert round((model.params_total - embeddings) / B) == 79
    assert round((model.params_active - embeddings) / B) == 3


def test_llama4_scout_counts_the_text_model_of_the_cards_109b():
    model = _import("llama-4-scout-17b-16e-instruct")
    assert model.params_total == 107_769_861_120  # Meta: 109B with the vision encoder
    assert round(model.params_active / B) == 17
    assert "no_rope_layer_interval not in the config: 4" in model.notes


def test_glm47_abridged_config_says_which_defaults_it_used():
    """The card's 355B total includes the multi-token-prediction layer; its 32B active excludes embeddings."""
    model = _import("glm-4.7-fp8")
    assert abs(model.params_total - 355 * B) / (355 * B) < 0.01
    assert abs(model.params_active - 2 * 151_552 * 5120 - 32 * B) / (32 * B) < 0.01
    assert "attention_bias not in the config: False, the glm4_moe default (transformers 4.54.0" in model.notes
    assert "use_qk_norm not in the config: False" in model.notes


def test_nemotron_h_hybrid_layers_and_no_formula():
    """Nemotron-H-56B (NVIDIA): 54 Mamba-2, 54 MLP and 10 self-attention layers."""
    with pytest.raises(InputError, match="model_type: no parameter-count formula for 'nemotron_h'"):
        _import("nemotron-h-56b-base-8k")
    model = _import("nemotron-h-56b-base-8k", params_total=56 * B)
    layout = kv_bytes_per_token_by_layer_kind(model, BF16)
    assert {k.kind: k.layers for k in layout.kinds} == {"full_attention": 10, "mamba": 54, "no_cache": 54}
    assert kv_bytes_per_token(model, BF16) == _kv(10, 8, 128)
    # Mamba-2 state (vLLM mamba2_state_shape), bf16: conv (256*64 + 2*8*256) x 3, SSM 256 x 64 x 256.
    assert layout.state_bytes_per_sequence == 54 * ((256 * 64 + 2 * 8 * 256) * 3 + 256 * 64 * 256) * 2


def test_pre_quantized_checkpoints_set_the_weight_dtype():
    assert _import("qwen3-32b-fp8").checkpoint_dtype == "fp8"
    assert _import("deepseek-r1").checkpoint_dtype == "fp8"
    assert _import("qwen3-8b").checkpoint_dtype is None


REFUSED = {
    "deepseek-v3.2": "index_topk: DeepSeek sparse attention: a lightning indexer caches its own keys per token",
    "glm-5": "index_topk: DeepSeek sparse attention",
    "gemma-4-26b-a4b": "text_config.attention_k_eq_v: keys double as values on the global layers",
    "llama-3.3-nemotron-super-49b-v1": "block_configs: every layer has its own attention shape (or none)",
    "minimax-m2.5": "model_type: 'minimax_m2' is not a family planner reads",
    "mimo-7b-base": "model_type: 'mimo' is not a family planner reads",
    "glm-4.7-flash": "model_type: 'glm4_moe_lite' is not a family planner reads",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_import_refuses_naming_the_field(name):
    path = CONFIGS / f"{name}.json"
    result = run("catalog", "import-hf", str(path), "--name", "x")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: {REFUSED[name]}")
    assert "--layer-kinds" in result.stderr and "--params-total" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_distinct_architectures():
    """At least 20 distinct architectures (the text model's model_type)."""
    kinds = set()
    for path in CONFIGS.glob("*.json"):
        if path.name.endswith(".index.json"):
            continue
        raw = json.loads(path.read_text())
        text = raw.get("text_config") or raw
        kinds.add(text.get("model_type") or raw["model_type"])
    assert len(kinds) >= 20, sorted(kinds)
    every = {p.stem for p in CONFIGS.glob("*.json") if not p.name.endswith(".index.json")}
    checked = set(KV) | set(CARD) | set(INDEX) | set(REFUSED) | {"nemotron-h-56b-base-8k", "gpt-oss-20b"}
    assert every <= checked, every - checked  # every file is checked by some test


# --- layer counts that disagree, and other refusals, on copies of the real files -----------------


def _variant(tmp_path: Path, name: str, nested: bool = False, **changes) -> Path:
    return config_variant(tmp_path, CONFIGS / f"{name}.json", nested=nested, **changes)


@pytest.mark.parametrize(
    ("name", "nested", "changes", "message"),
    [
        ("qwen3.5-27b", True, {"full_attention_interval": 8},
         "text_config.full_attention_interval: 8 gives 8 full-attention layers, layer_types 16"),
        ("gpt-oss-20b", False, {"layer_types": ["full_attention"] * 23},
         "layer_types: has 23 entries for num_hidden_layers 24"),
        ("gpt-oss-20b", False, {"layer_types": ["sliding_attention", "recurrent"] * 12},
         "layer_types[1]: layer kind 'recurrent' is not modelled"),
        ("nemotron-h-56b-base-8k", False, {"hybrid_override_pattern": "M*" * 58},
         "hybrid_override_pattern: has 116 blocks for num_hidden_layers 118"),
        ("llama-3.1-8b", False, {"layer_types": ["sliding_attention"] * 32},
         "layer_types: lists {'sliding_attention': 32}, the llama layout gives {'full_attention': 32}"),
        ("qwen3-8b", False, {"kv_lora_rank": 512},
         "kv_lora_rank: attention setting 512 that planner does not model for qwen3"),
        ("qwen3-32b-fp8", False, {"quantization_config": {"quant_method": "bitsandbytes"}},
         "quantization_config.quant_method: 'bitsandbytes' is not a format planner knows"),
        ("medgemma-27b-it", True, {"num_hidden_layers": None}, "text_config.num_hidden_layers: required field is missing"),
    ],
)
def test_refusals_name_the_field(tmp_path, name, nested, changes, message):
    path = _variant(tmp_path, name, nested, **changes)
    kwargs = {"params_total": 56 * B} if name.startswith("nemotron") else {}
    with pytest.raises(InputError, match=re.escape(f"{path}: {message}")):
        model_from_hf_config(path, name="x", **kwargs)


def test_defaults_of_a_sparse_config_are_the_families_and_are_noted(tmp_path):
    """A Gemma 3 text config that leaves out sliding_window_pattern, sliding_window and head_dim
    gets Gemma3TextConfig's defaults of transformers 4.50.0, each on a line of the notes."""
    path = _variant(tmp_path, "medgemma-27b-it", True, layer_types=None, sliding_window=None, head_dim=None)
    model = model_from_hf_config(path, name="g")
    assert (model.num_sliding_window_layers, model.sliding_window, model.head_dim) == (52, 4096, 256)
    for key, value in (("sliding_window_pattern", 6), ("sliding_window", 4096), ("head_dim", 256)):
        assert (f"text_config.{key} not in the config: {value}, the gemma3_text default "
                "(transformers 4.50.0 models/gemma3/configuration_gemma3.py)") in model.notes


def test_layer_kinds_override_states_an_unmodelled_layout():
    """What the refusal asks for: the layout and the count, given by hand."""
    model = model_from_hf_config(
        CONFIGS / "gemma-4-26b-a4b.json", name="g4", params_total=26 * B, params_active=4 * B,
        layer_kinds={"full_attention": 5, "sliding_attention": 25},
    )
    assert (model.num_sliding_window_layers, model.sliding_window) == (25, 1024)
    assert "layer kinds given on the command line: full_attention=5, sliding_attention=25" in model.notes


# --- counting from the checkpoint's own files ---------------------------------------------------


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A file with a real safetensors header and zeroed data (github.com/huggingface/safetensors, Format)."""
    size = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))


def test_weights_folder_counts_tensors_exactly_and_leaves_out_mtp(tmp_path):
    _safetensors(tmp_path / "model-1.safetensors", {
        "model.embed_tokens.weight": ("BF16", [1000, 64]),
        "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [64, 128]),
        "model.layers.0.mlp.down_proj.weight_scale_inv": ("F32", [1, 1]),
    })
    _safetensors(tmp_path / "model-2.safetensors", {
        "model.layers.61.eh_proj.weight": ("BF16", [64, 128]),  # DeepSeek's MTP layer (layer 61 of 61)
        "lm_head.weight": ("BF16", [1000, 64]),
    })


    w = read_weights(tmp_path, num_hidden_layers=61, dtype_bytes=None)
    assert w.params == 1000 * 64 * 2 + 64 * 128  # scales are not parameters
    assert w.weight_bytes == 1000 * 64 * 2 * 2 + 64 * 128 + 4
    assert w.excluded == ("model.layers.61.eh_proj.weight",)
    assert w.excluded_bytes == 64 * 128 * 2
    # Packed MXFP4 blocks: bytes count, elements are not parameters.
    _safetensors(tmp_path / "model-2.safetensors", {"model.layers.0.mlp.experts.down_proj_blocks": ("U8", [4, 16])})
    packed = read_weights(tmp_path, num_hidden_layers=61, dtype_bytes=None)
    assert packed.params is None


def test_a_folder_with_an_index_reads_only_the_shards_it_names(tmp_path):
    """Mistral's repositories ship consolidated.safetensors beside the transformers shards (the
    same weights twice, 47 GB each for Devstral-Small-2507): counting every file in the folder read
    twice the weights, which the 0.9-2x check let through."""
    shard = {"model.embed_tokens.weight": ("BF16", [1000, 64]), "lm_head.weight": ("BF16", [1000, 64])}
    _safetensors(tmp_path / "model-00001-of-00001.safetensors", shard)
    _safetensors(tmp_path / "consolidated.safetensors", {"tok_embeddings.weight": ("BF16", [1000, 64]),
                                                          "output.weight": ("BF16", [1000, 64])})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 2 * 1000 * 64 * 2},
        "weight_map": dict.fromkeys(shard, "model-00001-of-00001.safetensors")}))
    w = read_weights(tmp_path, num_hidden_layers=1, dtype_bytes=2)
    assert (w.params, w.weight_bytes, w.tensors) == (2 * 1000 * 64, 2 * 1000 * 64 * 2, 2)
    # an index naming a shard the folder lacks, or naming none: refused, naming it (every file there
    # would count consolidated.safetensors again)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {"x": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(InputError, match=re.escape(f"{index}: weight_map names 1 shard(s) the folder lacks "
                                                   "(model-00002-of-00002.safetensors)")):
        read_weights(tmp_path, num_hidden_layers=1, dtype_bytes=2)
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {"x": 5}}))
    with pytest.raises(InputError, match=re.escape(f'{index}: weight_map: "x" names no file (got 5)')):
        read_weights(tmp_path, num_hidden_layers=1, dtype_bytes=2)


def test_a_float32_checkpoint_is_served_in_fp16_at_two_bytes_a_weight(tmp_path):
    """vLLM's --dtype auto serves a float32 checkpoint in fp16 (engine arguments): the entry took its
    files' 4 bytes a weight as the bf16 weights the engine loads, doubling them in the ladder."""
    cfg = json.loads((CONFIGS / "gemma-2-27b-it.json").read_text())
    cfg.update(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=2,
               num_key_value_heads=1, head_dim=32, vocab_size=1000, torch_dtype="float32")
    cfg.pop("layer_types", None)  # one layer now: the 46-layer layout would not fit it
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    n = model_from_hf_config(folder / "config.json", name="f32").params_total  # the formula's count
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F32", [n])})
    model = model_from_hf_config(folder / "config.json", name="f32", weights=folder)
    assert model.checkpoint_dtype == "fp16" and model.checkpoint_weight_bytes == 2 * n
    assert f"bytes: 1 tensors in 1 safetensors file(s) (headers read)), served in fp16 (vLLM --dtype auto): {2 * n:,} bytes" in model.notes


def test_a_key_that_repeats_one_the_family_reads_is_not_an_unread_setting(tmp_path):
    """google/gemma-2-9b-it's config.json (transformers 4.42) carries sliding_window_size beside
    sliding_window, the same 4096: it was refused as an attention setting planner does not model."""
    same = config_variant(tmp_path, CONFIGS / "gemma-2-27b-it.json", sliding_window_size=4096)
    model = model_from_hf_config(same, name="g")
    assert model.sliding_window == 4096
    other = config_variant(tmp_path, CONFIGS / "gemma-2-27b-it.json", sliding_window_size=2048)
    with pytest.raises(InputError, match="sliding_window_size: attention setting 2048 that planner does not model"):
        model_from_hf_config(other, name="g")


def test_a_layer_count_that_is_a_digit_only_to_unicode_is_refused_in_one_line():
    r = run("catalog", "import-hf", CONFIGS / "gemma-2-27b-it.json", "--name", "x", "--layer-kinds",
            "full_attention=²", "-o", "unused.yaml")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--layer-kinds: expected KIND=COUNT,... with KIND one of" in r.output and "(got 'full_attention=²')" in r.output


def test_weights_that_are_not_safetensors_are_refused(tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00nope!")


    with pytest.raises(InputError, match=re.escape(f"{bad}: not a safetensors file (its header is not JSON)")):
        read_weights(bad, num_hidden_layers=1, dtype_bytes=2)


# --- the catalog entries made from these configs, through planner capacity -------------------


@pytest.mark.parametrize(
    ("model", "lines"),
    [
        ("gemma-3-27b", [
            "  3. − weights: 54.86 GB, the bf16 checkpoint          51.10 GiB",
            "       full_attention      10 layers x 2 (K, V) x 16 KV heads x 128 head_dim x 2 bytes = 81,920 bytes/token",
            "       sliding_attention   52 layers x 2 (K, V) x 16 KV heads x 128 head_dim x 2 bytes = 425,984 bytes/token, "
            "capped at 1,024 tokens",
            "  7. per user at the 131,072-token limit               10.41 GiB (capped layers hold 1,024 tokens)",
        ]),
        ("gpt-oss-120b", [
            "  3. − weights: 65.25 GB, the mxfp4 checkpoint         60.77 GiB",
            "       full_attention      18 layers x 2 (K, V) x 8 KV heads x 64 head_dim x 2 bytes = 36,864 bytes/token",
            "       sliding_attention   18 layers x 2 (K, V) x 8 KV heads x 64 head_dim x 2 bytes = 36,864 bytes/token, "
            "capped at 128 tokens",
            "  fp8 weights                                  not available: fp8 weights are larger than the mxfp4 "
            "weights already in use",
        ]),
    ],
)
def test_capacity_ladder_shows_the_sliding_window_layers(model, lines):
    result = run("capacity", model, "h100-sxm")
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    for line in lines:
        assert line in out


def test_capacity_json_carries_the_layer_kinds():
    result = run("capacity", "qwen3-next-80b", "h200", "--tp", "2", "--context-limit", "131072", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["kv_bytes_per_token"] == 24_576
    assert payload["kv_state_bytes_per_sequence"] == 36 * 1_097_728
    assert [(k["kind"], k["layers"]) for k in payload["kv_layer_kinds"]] == [("full_attention", 12), ("linear_attention", 36)]
    assert payload["kv_gib_per_user"] == (24_576 * 131_072 + 36 * 1_097_728) / 2**30


# (config, the class default an absent key takes, what an explicit null reads as), from each family's
# transformers configuration file: MHA where the class turns a null into num_attention_heads.
_KV_HEAD_DEFAULTS = [
    ("qwen3-30b-a3b.json", 4, 4),  # Qwen3MoeConfig keeps a null; the default stands
    ("mixtral-8x7b-v0.1.json", 8, "MHA"),
    ("qwen3-8b.json", 32, "MHA"),  # Qwen3Config: 32 whatever the head count
    ("qwen3-vl-8b-instruct.json", 32, "MHA"),
    ("gemma-2-27b-it.json", 4, 4),
    ("medgemma-27b-it.json", 4, 4),  # Gemma3TextConfig
    ("gpt-oss-20b.json", 8, "MHA"),
    ("llama-4-scout-17b-16e-instruct.json", 8, "MHA"),
    ("qwen3-next-80b-a3b-thinking.json", 2, 2),
    ("qwen3.5-27b.json", 4, 4),  # Qwen3_5TextConfig
    ("qwen3.5-35b-a3b.json", 2, 2),  # Qwen3_5MoeTextConfig, Qwen3NextConfig's default
    ("glm-4.7-fp8.json", 8, 8),
    ("llama-3.1-8b.json", "MHA", "MHA"),  # LlamaConfig's default is None: num_attention_heads
]


def _kv_heads_variant(tmp_path: Path, config: str, value) -> Path:
    """config.json with num_key_value_heads removed (value "absent") or null, in its text_config if nested."""
    cfg = json.loads((CONFIGS / config).read_text())
    target = cfg.get("text_config", cfg)
    target.pop("num_key_value_heads")
    if value == "null":
        target["num_key_value_heads"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(("config", "absent", "null"), _KV_HEAD_DEFAULTS)
def test_an_absent_or_null_kv_head_count_is_read_as_its_transformers_class_reads_it(tmp_path, config, absent, null):
    """An absent key takes the class default (Qwen3MoeConfig 4, MixtralConfig 8, Qwen3Config 32, ...),
    where it read as multi-head attention (8x and 4x the KV bytes a token of Qwen3-30B-A3B and Mixtral);
    an explicit null is num_attention_heads where the class says so "for backward compatibility", and
    the default where the class keeps the null (the model would not load)."""
    for given, want in (("absent", absent), ("null", null)):
        model = model_from_hf_config(_kv_heads_variant(tmp_path, config, given), name="x")
        assert model.num_key_value_heads == (model.num_attention_heads if want == "MHA" else want), given
        # the note says which: an explicit null was once noted as "not in the config"
        null_noted = "num_key_value_heads null:" in model.notes or "num_key_value_heads is null:" in model.notes
        absent_noted = "num_key_value_heads not in the config" in model.notes
        assert (null_noted, absent_noted) == (given == "null", given == "absent"), model.notes


def test_a_class_default_that_does_not_divide_the_heads_is_refused_naming_it(tmp_path):
    """Qwen2Config's 32 beside a 40-head model (cogito's Qwen2.5-14B) would not load: refused, the default named."""
    with pytest.raises(InputError, match="num_key_value_heads: not in the config, and the qwen2 class default 32 "
                                         "does not divide num_attention_heads 40"):
        model_from_hf_config(_kv_heads_variant(tmp_path, "cogito-v1-preview-qwen-14b.json", "absent"), name="x")
