"""Hostile model input (issue 17's second fuzzing campaign): crafted safetensors headers and
indices, checkpoints that disagree with their config, layer layouts that hold no cache,
impossible attention shapes, number formats of almost no bits. Each gets one line naming
the file and the place, exit 2, and nothing written; or, for what is real, the right answer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from clirun import run
from contract import one_line_error
from test_hostile_input import BASE

from planner.checkpoint import MAX_CHECKPOINT_SHARE, read_weights

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
LLAMA = CONFIGS / "llama-3.1-8b.json"
LLAMA_PARAMS = 8_030_261_248  # seed 000; planner.params (llama) counts it exactly
EMBED = "model.embed_tokens.weight"


def safetensors(path: Path, header: dict, data_bytes: int | None = None) -> Path:
    """A file laid out as the format says: 8-byte little-endian header length, JSON header,
    then `data_bytes` of tensor data (by default the end of the last tensor, when readable)."""
    if data_bytes is None:
        data_bytes = max((e["data_offsets"][1] for n, e in header.items() if n != "__metadata__"), default=0)
    blob = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(data_bytes))
    return path


def import_hf(*args):
    return run("catalog", "import-hf", LLAMA, "--name", "m", *args)


def error_line(r, code: int = 2) -> str:
    return one_line_error(r, code).removeprefix("error: ")


# ---- a header the format does not allow: one line naming the file and the tensor ------------
@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": [None, None]},
         "data_offsets: expected [begin, end], two integers >= 0 (got [null, null])"),
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": ["a", "b"]},
         'data_offsets: expected [begin, end], two integers >= 0 (got ["a", "b"])'),
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8.5]},
         "data_offsets: expected [begin, end], two integers >= 0 (got [0, 8.5])"),
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": [0]},
         "data_offsets: expected [begin, end], two integers >= 0 (got [0])"),
        ({"dtype": "BF16", "shape": ["x"], "data_offsets": [0, 8]},
         'shape: expected a list of integers >= 0 (got ["x"])'),
        ({"dtype": "BF16", "shape": 4, "data_offsets": [0, 8]}, "shape: expected a list of integers >= 0 (got 4)"),
        ({"dtype": "BF16", "shape": None, "data_offsets": [0, 8]}, "shape: expected a list of integers >= 0 (got null)"),
        ({"dtype": "BF16", "shape": [-2, 2], "data_offsets": [8, 0]},
         "shape: expected a list of integers >= 0 (got [-2, 2])"),
        ({"dtype": "BF16", "shape": [2, True], "data_offsets": [0, 4]},
         "shape: expected a list of integers >= 0 (got [2, true])"),
        ({"dtype": ["BF16"], "shape": [2, 2], "data_offsets": [0, 8]}, 'unknown safetensors dtype ["BF16"]'),
        ({"dtype": {}, "shape": [2, 2], "data_offsets": [0, 8]}, "unknown safetensors dtype {}"),
        ({"dtype": "BF16", "shape": [2, 2]}, "header entry lacks dtype, shape or data_offsets"),
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 0]}, "data_offsets: end 0 is before begin 8"),
        ({"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 6]},
         "6 bytes for 4 BF16 elements (shape [2, 2] takes 8 bytes)"),
        ({"dtype": "BF16", "shape": [10**20] * 4, "data_offsets": [0, 8]},
         "8 bytes for about 2^265 BF16 elements (shape [100000000000000000000, 100000000000000000000, "
         "1000000000000... (92 characters) takes about 2^266 bytes)"),
    ],
)
def test_a_crafted_tensor_entry_is_refused_naming_file_and_tensor(tmp_path, entry, problem):
    file = safetensors(tmp_path / "w" / "model.safetensors", {EMBED: entry}, data_bytes=8)
    r = import_hf("--weights", tmp_path / "w", "--out", tmp_path / "m.yaml")
    assert error_line(r) == f"{file}: tensor '{EMBED}': {problem}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]


def test_tensors_must_tile_the_data_as_the_reference_reader_requires(tmp_path):
    """Overlapping tensors would count the same bytes twice; a gap or a short file is not the format."""
    a = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}
    file = safetensors(tmp_path / "model.safetensors", {EMBED: a, "lm_head.weight": a})
    assert error_line(import_hf("--weights", file)) == (
        f"{file}: tensor '{EMBED}': data_offsets [0, 8] overlaps the tensor before it "
        "(expected to begin at byte 8: the tensors' bytes follow one another)"
    )
    b = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [16, 24]}
    safetensors(file, {EMBED: a, "lm_head.weight": b})
    assert error_line(import_hf("--weights", file)) == (
        f"{file}: tensor 'lm_head.weight': data_offsets [16, 24] leaves a gap after the tensor before it "
        "(expected to begin at byte 8: the tensors' bytes follow one another)"
    )
    safetensors(file, {EMBED: a}, data_bytes=4)
    assert error_line(import_hf("--weights", file)) == (
        f"{file}: the header's tensors take 8 bytes, the file holds 4 after its header (a truncated or padded file)"
    )


def test_a_header_length_past_the_file_is_refused(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(struct.pack("<Q", 1000) + b"{}")
    assert error_line(import_hf("--weights", file)) == (
        f"{file}: not a safetensors file (header length 1,000 bytes in a file of 10)"
    )


@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json"])
def test_json_nested_past_the_stack_is_refused_naming_the_file(tmp_path, name):
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / name
    if name.endswith(".safetensors"):
        path.write_bytes(struct.pack("<Q", len(deep)) + deep.encode())
        expected = "not a safetensors file (its header is JSON nested too deeply)"
    else:
        path.write_text('{"metadata": {"total_size": 1}, "weight_map": ' + deep + "}")
        expected = "invalid JSON: nested too deeply"
    assert error_line(import_hf("--weights", tmp_path)) == f"{path}: {expected}"


@pytest.mark.parametrize(
    ("total", "shown"),
    [(10**400, "about 2^1328"), (True, "true"), ("1", '"1"'), (0, "0"), (10**15 + 1, "1,000,000,000,000,001")],
    ids=["401-digits", "boolean", "text", "zero", "past-1PB"],
)
def test_an_index_total_size_is_a_positive_bounded_integer(tmp_path, total, shown):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": {EMBED: "a"}}))
    assert error_line(import_hf("--weights", index)) == (
        f"{index}: metadata.total_size: expected a positive integer of bytes, at most 1,000,000,000,000,000 (got {shown})"
    )


# ---- a self-consistent checkpoint that is not this config's model ---------------------------
HINT = ("a checkpoint holds at least 90% and at most 2 times the model its config describes (more: a vision "
        "tower, multi-token-prediction layers)")
ASK = "are these the weights of this config? (give --params-total if the count is wrong)"


def test_a_checkpoint_of_four_parameters_for_an_8b_config_is_refused(tmp_path):
    folder = tmp_path / "w"
    safetensors(folder / "model.safetensors", {EMBED: {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
    r = import_hf("--weights", folder, "--out", tmp_path / "m.yaml")
    assert error_line(r) == (
        f"{folder}: the checkpoint holds 4 parameters, planner.params (llama) counts {LLAMA_PARAMS:,}: {HINT}; {ASK}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]


def test_an_index_of_one_byte_for_an_8b_config_is_refused(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {EMBED: "model.safetensors"}}))
    assert error_line(import_hf("--weights", tmp_path)) == (
        f"{tmp_path}: the checkpoint holds 1 bytes, 1.25e-10 per parameter of the {LLAMA_PARAMS:,} that "
        f"planner.params (llama) counts: {HINT}, at 4 to 32 bits a weight; {ASK}"
    )


def _index(tmp_path: Path, total_size: int) -> Path:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total_size}, "weight_map": {EMBED: "model.safetensors"}}))
    return index


def test_the_tolerance_is_the_stated_one_both_ways(tmp_path):
    """bf16 index: total_size / 2 parameters. Up to twice the count (a tower, MTP layers) and down
    to 90% of it are read; one parameter past either bound is refused."""
    for params, ok in [
        (LLAMA_PARAMS * 2, True), (LLAMA_PARAMS * 2 + 1, False),
        (-(-LLAMA_PARAMS * 9 // 10), True), (LLAMA_PARAMS * 9 // 10 - 1, False),
    ]:
        r = import_hf("--weights", _index(tmp_path, 2 * params))
        if ok:
            assert r.exit_code == 0, r.output
            assert f"params_total: {params}\n" in r.stdout
        else:
            assert error_line(r).startswith(f"{tmp_path / 'model.safetensors.index.json'}: the checkpoint holds {params:,} parameters")
    assert MAX_CHECKPOINT_SHARE == 2.0


def test_the_count_given_on_the_command_line_is_the_reference(tmp_path):
    """When the formula is wrong, --params-total states the count the checkpoint must agree with."""
    index = _index(tmp_path, 2 * 4_000_000_000)
    assert "planner.params (llama) counts" in error_line(import_hf("--weights", index))
    r = import_hf("--weights", index, "--params-total", 4_100_000_000)
    assert r.exit_code == 0, r.output
    assert error_line(import_hf("--weights", index, "--params-total", 10**10)).startswith(
        f"{index}: the checkpoint holds 4,000,000,000 parameters, --params-total counts 10,000,000,000: "
    )


def test_a_quantized_checkpoint_is_held_to_its_bytes(tmp_path):
    """Packed tensors leave the parameters unknown; the bytes must lie between 4 and 32 bits a
    weight of the count (within the shares). gpt-oss-20b's real index lies inside."""
    real = CONFIGS / "gpt-oss-20b.safetensors.index.json"
    r = run("catalog", "import-hf", CONFIGS / "gpt-oss-20b.json", "--name", "g", "--weights", real)
    assert r.exit_code == 0, r.output
    assert "checkpoint_weight_bytes: 13761264768" in r.stdout
    fake = tmp_path / "model.safetensors.index.json"
    fake.write_text(json.dumps({"metadata": {"total_size": 10**9}, "weight_map": {"lm_head.weight": "a"}}))
    line = error_line(run("catalog", "import-hf", CONFIGS / "gpt-oss-20b.json", "--name", "g", "--weights", fake))
    assert line.startswith(f"{fake}: the checkpoint holds 1,000,000,000 bytes, 0.0478 per parameter of the 20,914,757,184")


def test_a_real_checkpoint_layout_still_reads_exactly(tmp_path):
    """A header as safetensors writes it (offsets in order, data to the end, __metadata__) reads."""
    header = {
        "__metadata__": {"format": "pt"},
        "lm_head.weight": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]},
        EMBED: {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]},
        "model.norm.weight": {"dtype": "BF16", "shape": [0], "data_offsets": [32, 32]},
        "model.layers.0.mlp.qweight": {"dtype": "I32", "shape": [2], "data_offsets": [32, 40]},
    }
    w = read_weights(safetensors(tmp_path / "model.safetensors", header), num_hidden_layers=1, dtype_bytes=2)
    assert (w.weight_bytes, w.tensors, w.params) == (40, 4, None)  # packed int32: parameters unknown
    del header["model.layers.0.mlp.qweight"]
    w = read_weights(safetensors(tmp_path / "model.safetensors", header), num_hidden_layers=1, dtype_bytes=2)
    assert (w.weight_bytes, w.tensors, w.params) == (32, 3, 12)


# ---- layer layouts with no cache: refused at import and at catalog load ----------------------
SHARED = ("num_kv_shared_layers 32: kv_shared layers read the cache of an earlier attention layer, and none of "
          "the 32 layers stores one (all are kv_shared, state or no_cache layers)")
CACHELESS = ("num_cacheless_layers 32: no layer holds a cache or a state, so a sequence would take no memory; "
             "planner plans for models whose attention or state layers hold one")


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ("kv_shared=32", SHARED),
        ("no_cache=32", CACHELESS),
        ("mamba=16,kv_shared=16", SHARED.replace("32: kv", "16: kv")),
    ],
)
def test_import_refuses_a_layout_that_holds_no_cache(tmp_path, kinds, expected):
    state = ["--state-bytes-per-layer", 1000] if "mamba" in kinds else []
    r = import_hf("--layer-kinds", kinds, *state, "--out", tmp_path / "ks.yaml")
    assert error_line(r) == f"{LLAMA}: {expected}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "expected"),
    [("num_kv_shared_layers: 32", SHARED), ("num_cacheless_layers: 32", CACHELESS)],
)
@pytest.mark.parametrize("command", [("capacity", "llama-3.1-8b", "h100-sxm", "--typical-tokens", 2000), ("kv", "llama-3.1-8b")])
def test_catalog_load_refuses_a_layout_that_holds_no_cache(tmp_path, override, expected, command):
    catalog = tmp_path / "ks.yaml"
    catalog.write_text(f"models: {{llama-3.1-8b: {{{override}}}}}\n")
    r = run(*command, "--catalog", catalog)
    assert error_line(r) == f"{catalog}: models.llama-3.1-8b: {expected}"


def test_solve_refuses_a_layout_that_holds_no_cache_instead_of_calling_it_infeasible(tmp_path):
    """Before: exit 3, 'stopped by memory: no rate meets it', for a model that needs no memory."""
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "catalog:\n  models: {llama-3.1-8b: {num_kv_shared_layers: 32}}\n")
    r = run("solve", path, "--out-dir", tmp_path / "out")
    assert error_line(r) == f"{path}: catalog: models.llama-3.1-8b: {SHARED}"
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("kinds", ["kv_shared=31,full_attention=1", "full_attention=1,no_cache=31", "mamba=32"])
def test_layouts_that_hold_something_per_sequence_are_planned(tmp_path, kinds):
    """One attention layer is enough to share; a pure state-space stack holds its fixed state."""
    out = tmp_path / "m.yaml"
    state = ["--state-bytes-per-layer", 10**6] if "mamba" in kinds else []
    assert import_hf("--layer-kinds", kinds, *state, "--out", out).exit_code == 0
    r = run("capacity", "m", "h100-sxm", "--catalog", out, "--typical-tokens", 2000)
    assert r.exit_code == 0, r.output
    assert "(the guarantee)" in r.stdout


# ---- attention shapes: the query heads share the key/value heads in equal groups -----------
HEADS = ("num_key_value_heads {kv} must divide num_attention_heads 32: the query heads share the key/value heads "
         "in equal groups (grouped-query attention, arXiv 2305.13245; one each in multi-head and latent attention)")


@pytest.mark.parametrize("kv", [64, 5])
def test_import_refuses_impossible_kv_heads(tmp_path, kv):
    config = json.loads(LLAMA.read_text())
    config["num_key_value_heads"] = kv
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = run("catalog", "import-hf", path, "--name", "m", "--out", tmp_path / "m.yaml")
    assert error_line(r) == f"{path}: {HEADS.format(kv=kv)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


@pytest.mark.parametrize("kv", [65, 3])
def test_catalog_override_refuses_impossible_kv_heads(tmp_path, kv):
    catalog = tmp_path / "c.yaml"
    catalog.write_text(f"models: {{llama-3.1-8b: {{num_key_value_heads: {kv}}}}}\n")
    r = run("kv", "llama-3.1-8b", "--catalog", catalog)
    assert error_line(r) == f"{catalog}: models.llama-3.1-8b: {HEADS.format(kv=kv)}"


# ---- number formats: at least one bit an element --------------------------------------------
@pytest.mark.parametrize(
    ("bits", "expected"),
    [
        ("1.0e-09", "Input should be greater than or equal to 1 (got 1e-09)"),
        ("0", "Input should be greater than or equal to 1 (got 0)"),
        ("65", "Input should be less than or equal to 64 (got 65)"),
    ],
)
def test_a_dtype_of_almost_no_bits_is_refused(tmp_path, bits, expected):
    catalog = tmp_path / "c.yaml"
    catalog.write_text(f"dtypes: {{fp8: {{bits_per_element: {bits}}}}}\n")
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--catalog", catalog, "--kv-dtype", "fp8", "--weight-dtype", "fp8",
            "--prompt-tokens", 1000, "--output-tokens", 100, "--max-model-len", 8192)
    assert error_line(r) == f"{catalog}: dtypes.fp8.bits_per_element: {expected}"


def test_a_one_bit_dtype_is_planned():
    """The bound is physical, not a guess at today's formats: one bit per element plans."""
    from planner.catalog import load_catalog

    catalog = load_catalog().with_overrides({"dtypes": {"fp8": {"bits_per_element": 1}}}, where="test")
    assert catalog.dtype("fp8").bytes_per_element == 0.125


def _single_field_edits(doc: dict, path: tuple = ()):
    """Every numeric field of a config set to 0 or null, or removed, one at a time (nested ones too)."""
    for key, value in doc.items():
        if isinstance(value, dict):
            yield from _single_field_edits(value, (*path, key))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            for edit in (0, None, "removed"):
                yield (*path, key), edit


def test_every_single_field_edit_of_every_real_config_is_imported_or_refused_never_a_crash(tmp_path):
    """MoE and latent-attention configs with their expert count 0 or missing, or kv_lora_rank null,
    once reached the parameter count without those fields (KeyError: 28 of 2,502 edits)."""
    import copy

    from planner.errors import InputError
    from planner.hf_import import model_from_hf_config

    edited, edits, refused = tmp_path / "config.json", 0, 0
    for config in sorted(CONFIGS.glob("*.json")):
        if config.name.endswith(".index.json"):
            continue
        raw = json.loads(config.read_text(encoding="utf-8"))
        for path, edit in _single_field_edits(raw):
            doc = copy.deepcopy(raw)
            inner = doc
            for key in path[:-1]:
                inner = inner[key]
            if edit == "removed":
                del inner[path[-1]]
            else:
                inner[path[-1]] = edit
            edited.write_text(json.dumps(doc), encoding="utf-8")
            edits += 1
            try:
                model_from_hf_config(edited, name="m")
            except InputError:
                refused += 1
    assert edits > 2_000 and refused > 0  # (2,502 edits of 33 configs when this was written)


@pytest.mark.parametrize(("config", "key", "value", "message"), [
    ("deepseek-r1.json", "n_routed_experts", 0, "n_routed_experts: a deepseek_v3 model routes every token to experts"),
    ("mixtral-8x7b-v0.1.json", "num_local_experts", 0, "num_local_experts: a mixtral model routes every token"),
    ("deepseek-r1.json", "kv_lora_rank", None, "kv_lora_rank: required field is missing"),
    ("deepseek-r1.json", "n_routed_experts", None,
     "n_routed_experts: required field is missing (a deepseek_v3 model routes every token to experts)"),
])
def test_a_moe_config_without_experts_or_an_mla_one_without_its_rank_is_refused_by_name(tmp_path, config, key, value,
                                                                                        message):
    doc = json.loads((CONFIGS / config).read_text(encoding="utf-8"))
    doc[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert message in error_line(run("catalog", "import-hf", path, "--name", "m"))


@pytest.mark.parametrize(("args", "message"), [
    (["--layer-kinds", "full_attention=16,full_attention=16"], "--layer-kinds: full_attention is given twice"),
    (["--layer-kinds", ""], "--layer-kinds: no KIND=COUNT given"),
    (["--layer-kinds", "full_attention=32", "--state-bytes-per-layer", 100],
     "--state-bytes-per-layer: no linear_attention or mamba layer in --layer-kinds holds a state"),
])
def test_layer_kinds_that_would_be_summed_or_ignored_are_refused(args, message):
    assert message in error_line(import_hf(*args))


# ---- what real configs carry, read as the engines read it ----------------------------------
def _config(tmp_path: Path, doc: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(("key", "value"), [
    ("_attn_implementation", "eager"),  # the original google/gemma-2-27b config.json (transformers 4.42)
    ("_attn_implementation_autoset", True),  # written by transformers 4.46-4.48 into saved configs
    ("attn_implementation", "flash_attention_2"),
])
def test_a_key_that_only_picks_the_attention_kernel_is_no_reason_to_refuse(tmp_path, key, value):
    """They choose eager, sdpa or flash kernels: neither the cache nor the parameter count changes.
    Before, the import refused them as attention settings it did not model."""
    from planner.hf_import import model_from_hf_config

    doc = {**json.loads(LLAMA.read_text(encoding="utf-8")), key: value}
    model = model_from_hf_config(_config(tmp_path, doc), name="m")
    assert model.params_total == LLAMA_PARAMS
    assert model.num_key_value_heads == 8


# DeepSeek-V2-Lite's config.json as published (huggingface.co/deepseek-ai/DeepSeek-V2-Lite): no query
# compression (q_lora_rank null), one leading dense layer, two shared experts.
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840, "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "first_k_dense_replace": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_experts_per_tok": 6, "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 27,
    "topk_method": "greedy", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 102400,
}


def test_deepseek_v2_counts_its_published_size_and_takes_its_own_class_defaults(tmp_path):
    """15.7B parameters (DeepSeek-V2 paper, arXiv 2405.04434, appendix: DeepSeek-V2-Lite). A V2 config
    without first_k_dense_replace and n_shared_experts takes DeepseekV2Config's 0 and 2, where V3's
    class (3 and 1) once gave V2-Lite 14.49B and a note that named V3's file as V2's."""
    from planner.hf_import import model_from_hf_config

    published = model_from_hf_config(_config(tmp_path, DEEPSEEK_V2_LITE), name="m")
    assert round(published.params_total / 1e9, 1) == 15.7
    bare = {k: v for k, v in DEEPSEEK_V2_LITE.items() if k not in ("first_k_dense_replace", "n_shared_experts")}
    defaulted = model_from_hf_config(_config(tmp_path, bare, "bare.json"), name="m")
    stated = model_from_hf_config(_config(tmp_path, {**bare, "first_k_dense_replace": 0, "n_shared_experts": 2},
                                          "stated.json"), name="m")
    assert defaulted.params_total == stated.params_total != published.params_total
    assert "first_k_dense_replace not in the config: 0, the deepseek_v2 default" in defaulted.notes
    assert "models/deepseek_v2/configuration_deepseek_v2.py" in defaulted.notes


def test_more_experts_a_token_than_experts_is_named_by_its_keys(tmp_path):
    """Before, the parameter counts clashed later, with advice about command-line flags not given."""
    doc = {**json.loads((CONFIGS / "mixtral-8x7b-v0.1.json").read_text(encoding="utf-8")), "num_experts_per_tok": 10}
    assert error_line(run("catalog", "import-hf", _config(tmp_path, doc), "--name", "m")).endswith(
        "num_experts_per_tok: 10 experts a token, more than the 8 there are (num_local_experts)")


def test_kv_heads_that_do_not_divide_the_heads_are_named_with_the_nested_prefix(tmp_path):
    text = {**json.loads(LLAMA.read_text(encoding="utf-8")), "num_key_value_heads": 5}
    doc = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "text_config": text}
    assert f"text_config.{HEADS.format(kv=5)}" in error_line(
        run("catalog", "import-hf", _config(tmp_path, doc), "--name", "m"))


def test_tp_past_the_kv_heads_must_be_a_multiple_of_them(tmp_path):
    """vLLM replicates each KV head on tp / heads GPUs (QKVParallelLinear's divide() asserts a whole
    number): 12 KV heads run on tp 4 or tp 12's multiples, never tp 16, which was planned as 16 heads."""
    doc = {**json.loads(LLAMA.read_text(encoding="utf-8")), "num_attention_heads": 48, "num_key_value_heads": 12,
           "head_dim": 128}
    catalog = tmp_path / "m.yaml"
    assert run("catalog", "import-hf", _config(tmp_path, doc), "--name", "m", "-o", catalog).exit_code == 0
    assert run("kv", "m", "--catalog", catalog, "--tp", 4, "--tokens", 1000).exit_code == 0
    assert "tensor-parallel degree 16 is not a multiple of the 12 KV heads of 'm'" in error_line(
        run("kv", "m", "--catalog", catalog, "--tp", 16, "--tokens", 1000))


def test_a_byte_order_mark_is_no_part_of_the_text(tmp_path):
    """Windows editors start a UTF-8 file with one; json refused it with Python's own hint."""
    from planner.hf_import import model_from_hf_config

    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + LLAMA.read_bytes())
    assert model_from_hf_config(path, name="m").params_total == LLAMA_PARAMS


def test_a_modelopt_quantization_config_is_read_by_its_producer_and_one_without_a_method_is_named(tmp_path):
    """NVIDIA ModelOpt's own config names its producer and algorithm, no quant_method (as in
    nvidia's Qwen3-32B-FP8-Static-PerTensor); one that names neither was told "'None' is not a format"."""
    from planner.hf_import import model_from_hf_config

    llama = json.loads(LLAMA.read_text(encoding="utf-8"))
    producer = {"name": "modelopt", "version": "0.31.0"}
    flat = {"quant_algo": "FP8", "ignore": ["lm_head"], "producer": producer}
    nested = {"producer": producer, "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    for qc, dtype in ((flat, "fp8"), (nested, "fp4")):  # a config.json's shape, and hf_quant_config.json's
        model = model_from_hf_config(_config(tmp_path, {**llama, "quantization_config": qc}), name="m")
        assert model.checkpoint_dtype == dtype
    r = run("catalog", "import-hf", _config(tmp_path, {**llama, "quantization_config": {"producer": producer}},
                                            "no_algo.json"), "--name", "m")
    assert error_line(r).endswith("quantization_config.quant_algo: required field is missing (ModelOpt's "
                                  "algorithm: FP8 or NVFP4)")
    r = run("catalog", "import-hf", _config(tmp_path, {**llama, "quantization_config": {"bits": 8}}, "bare.json"),
            "--name", "m")
    assert error_line(r).endswith("quantization_config.quant_method: required field is missing (the weights' format: "
                                  "fp8, mxfp4, awq, gptq, compressed-tensors or modelopt)")


def test_a_config_that_lists_its_blocks_instead_of_counting_them_is_told_so(tmp_path):
    """Nemotron-3 Ultra's config has no num_hidden_layers, and Nemotron-3.5's no hybrid_override_pattern:
    both list their blocks in layers_block_type, a layout the import does not read. The refusals said
    only 'required field is missing'."""
    config = json.loads((Path(__file__).parent / "data" / "hf_configs" / "nemotron-h-56b-base-8k.json").read_text())
    blocks = len(config.pop("hybrid_override_pattern"))
    del config["num_hidden_layers"]
    config["layers_block_type"] = ["mamba", "moe"] * (blocks // 2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = run("catalog", "import-hf", path, "--name", "n3")
    assert error_line(r) == (f"{path}: num_hidden_layers: required field is missing: this config lists its blocks in "
                             "layers_block_type instead, a layout planner does not read (Nemotron-H's "
                             "hybrid_override_pattern it does)")
    # Nemotron-3.5 counts its layers and lists its blocks the same way
    config["num_hidden_layers"] = blocks
    path.write_text(json.dumps(config))
    r = run("catalog", "import-hf", path, "--name", "n3")
    assert error_line(r) == (f"{path}: hybrid_override_pattern: required field is missing: this config lists its "
                             "blocks in layers_block_type instead, a layout planner does not read")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # a dense model at a FLOP rate of 1B parameters planned 18.1 requests/s a replica against 8.7
        ("llama-3.1-8b: {params_active: 1000000000}",
         "models.llama-3.1-8b: params_active 1,000,000,000 is under half of params_total 8,030,261,248 in a dense "
         "model: only a mixture of experts (num_experts, num_experts_per_tok) leaves most parameters idle for a "
         "token; a vision tower is a small part of a model"),
        # every expert active: the speed model divided by the experts left idle (ZeroDivisionError, exit 1)
        ("mixtral-8x7b: {num_experts_per_tok: 8}",
         "models.mixtral-8x7b: num_experts_per_tok 8 is not below num_experts 8: a token would run every expert, "
         "which makes the model dense (leave both out)"),
        ("mixtral-8x7b: {num_experts_per_tok: 9}",
         "models.mixtral-8x7b: num_experts_per_tok 9 is not below num_experts 8: a token would run every expert, "
         "which makes the model dense (leave both out)"),
        # read as one windowed layer's worth of nothing: full attention on every layer, without a word
        ("llama-3.1-8b: {sliding_window: 4096}",
         "models.llama-3.1-8b: sliding_window 4096 given without num_sliding_window_layers: state how many of the "
         "32 layers are windowed (all of them for a model whose config windows every layer, as Mistral 7B v0.1's "
         "does)"),
    ],
)
def test_a_catalog_model_whose_fields_contradict_each_other_is_refused(tmp_path, override, expected):
    """Found by an outside probe: each was planned (or crashed) instead of being refused."""
    catalog = tmp_path / "m.yaml"
    catalog.write_text(f"models: {{{override}}}\n")
    r = run("capacity", "mixtral-8x7b", "h100-sxm", "--tp", 2, "--prompt-tokens", 2000, "--output-tokens", 300,
            "--catalog", catalog)
    assert error_line(r) == f"{catalog}: {expected}"
