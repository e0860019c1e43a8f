"""A catalog Model entry from a Hugging Face `config.json` on disk (no network): imported
exactly, or refused by name, never silently wrong.

Reading. The JSON is read directly, not through `transformers.AutoConfig` (measured as an
optional extra and rejected, see README "Importing a Hugging Face model"): AutoConfig fills
every key a config leaves out without saying so, cannot read a `model_type` newer than the
installed release, and is a large install for what amounts to reading a dictionary. Instead:
- text settings nested under `text_config`, `language_config` or `llm_config` (multimodal
  configs: Gemma 3, Llama 4, Qwen3-VL, Qwen3.5) are read there, with `tie_word_embeddings`,
  the dtype and `quantization_config` taken from the outer config when the inner one lacks
  them; every message names the nested field (`text_config.num_hidden_layers`)
  (planner.hf_config);
- the `model_type` picks a family (planner.hf_families) that knows the layer layout, the
  parameter-count formula and the defaults of that `model_type` in the transformers release
  that introduced it; each default used is a line of the entry's notes;
- the layer kinds come from `layer_types`, a family's pattern (Gemma 2/3, gpt-oss, Llama 4's
  no_rope_layers, Qwen3-Next's full_attention_interval, Nemotron-H's hybrid_override_pattern;
  planner.hf_layouts) or `--layer-kinds`;
- `quantization_config` sets the checkpoint's weight dtype (fp8, MXFP4, NVFP4, int4 AWQ/GPTQ;
  planner.hf_weights).

Refusing. An unknown `model_type`, an attention setting no family reads, a setting of an
architecture planner knows it does not model (hf_families.NOT_MODELLED), or layer counts that
disagree (layer_types against num_hidden_layers or full_attention_interval) stop the import
with exit 2, naming the field and what to give instead: `--layer-kinds` to state the layout,
`--params-total` (and `--params-active`) for the counts, `--weights` for the checkpoint files.

Parameters. With `--weights` (a model folder or its model.safetensors.index.json) they are
the checkpoint's own (planner.checkpoint), else the family's formula (planner.hf_counts,
planner.params); `params_source` says which, and what the other would have said
(planner.hf_weights).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from planner.catalog import Model, grouped_heads_problem
from planner.checkpoint import check_count, read_weights
from planner.errors import InputError
from planner.hf_config import (
    NESTED_CONFIG_KEYS,
    ConfigFields,
    FamilyReader,
    read_hf_config,
    text_config,
)
from planner.hf_families import (
    ATTENTION_KEY,
    BY_MODEL_TYPE,
    COVERED_MODEL_TYPES,
    HARMLESS_KEYS,
    NOT_MODELLED,
    Family,
)
from planner.hf_layouts import LAYER_KINDS, SLIDING_NAMES, STATE_KINDS, Layout, from_layer_types
from planner.hf_weights import (
    note_uncounted,
    quantized_dtype,
    resolve_params,
    store_checkpoint,
    towers_of,
)
from planner.yamlio import validate

_GENERIC = Family("generic", (), "none: no defaults for a model_type planner does not know")
# Keys a release of transformers wrote beside the one the family reads, with the same value: a repeat,
# not a setting of its own (google/gemma-2-9b-it's config.json, transformers 4.42, carries
# "sliding_window_size": 4096 next to "sliding_window": 4096). Another value is refused as unread.
REPEATED_KEYS = {"sliding_window_size": "sliding_window"}
# Families with a num_key_value_heads default whose transformers config turns an explicit null into
# num_attention_heads (multi-head attention) "for backward compatibility", read in their configuration
# files (huggingface/transformers: MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config,
# Qwen3VLTextConfig, Llama4TextConfig, GptOssConfig). Gemma2Config, Gemma3TextConfig, Qwen3MoeConfig,
# Qwen3NextConfig and Glm4MoeConfig keep a null as given (the model then does not load).
_NULL_KV_HEADS_IS_MHA = frozenset({"mistral", "mixtral", "qwen2", "qwen3", "qwen3_vl", "llama4", "gpt_oss"})


def parse_layer_kinds(text: str) -> dict[str, int]:
    """`full_attention=12,linear_attention=36` -> counts by kind (hf_families.LAYER_KINDS)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, sep, count = part.partition("=")
        kind = kind.strip()
        # ASCII digits: str.isdigit() takes '²', which int() then refuses with a traceback
        if not sep or kind not in LAYER_KINDS or not re.fullmatch(r"[0-9]+", count.strip()):
            raise InputError(
                f"--layer-kinds: expected KIND=COUNT,... with KIND one of {', '.join(LAYER_KINDS)} (got '{part}')"
            )
        if kind in out:
            raise InputError(f"--layer-kinds: {kind} is given twice (give each kind once, with its count)")
        out[kind] = int(count)
    if not out:
        raise InputError("--layer-kinds: no KIND=COUNT given")
    return out


def model_from_hf_config(
    path: str | Path,
    *,
    name: str,
    params_total: int | None = None,
    params_active: int | None = None,
    hf_id: str | None = None,
    config_source: str | None = None,
    weights: str | Path | None = None,
    layer_kinds: Mapping[str, int] | None = None,
    state_bytes_per_layer: int | None = None,
) -> Model:
    """Build the catalog `Model` named `name` from the config.json at `path` (module docstring).

    `params_total` / `params_active` override the counted parameters; `weights` (a model folder
    or its safetensors index) counts them from the checkpoint. `layer_kinds` states the layout
    (counts by kind) instead of reading it; `state_bytes_per_layer` the state of its
    linear-attention / state-space layers. `hf_id` defaults to the config's `_name_or_path`
    when that looks like a Hub id; `config_source` to a note naming the file's base name.
    """
    where = str(path)
    outer = read_hf_config(path)
    cfg = text_config(outer, where)
    architectures = ConfigFields(outer, where).texts("architectures")
    model_type = cfg.text("model_type") or ConfigFields(outer, where).text("model_type")
    if not architectures and not model_type:
        raise cfg.error("architectures", "required field is missing (and no model_type either)")
    architecture = architectures[0] if architectures else str(model_type)

    _refuse_not_modelled(cfg, outer, layer_kinds)
    family = BY_MODEL_TYPE.get(model_type or "")
    if family is None:
        if not (layer_kinds and params_total):
            what = (f"'{model_type}' is not a family planner reads" if model_type else
                    f"required field is missing (architectures: {', '.join(architectures)}); planner reads a "
                    "model's layers by its family")
            raise ConfigFields(outer, where).error(
                "model_type",
                f"{what} (covered: {', '.join(COVERED_MODEL_TYPES)}); "
                "its layers and parameters cannot be read safely: give --layer-kinds KIND=N,... and --params-total "
                "(and --params-active for MoE) to import it anyway",
            )
        family = _GENERIC
    r = FamilyReader(cfg, family, model_type or architecture)
    if family is not _GENERIC and not layer_kinds:
        _refuse_unread_attention_keys(r, outer)

    entry = _architecture_fields(r, name, hf_id or _hub_id(outer))
    layout = _layout_from_cli(r, layer_kinds, state_bytes_per_layer) if layer_kinds else _read_layout(r)
    r.layout = layout
    _store_layout(entry, layout, r)

    checkpoint_dtype = quantized_dtype(r)
    counted = family.count(r, entry) if family.count else None
    read = read_weights(weights, num_hidden_layers=r.layers, dtype_bytes=None if checkpoint_dtype else r.dtype_bytes) if weights else None
    if read is not None and (params_total or counted):
        reference = "--params-total" if params_total else f"planner.params ({family.name})"
        check_count(read, params_total or counted.total, reference, where=str(weights))
    total, active, how = resolve_params(r, counted, read, params_total, params_active, bool(entry.get("num_experts")),
                                        towers_of(outer))
    if active > total:
        raise InputError(f"params_active {active} exceeds params_total {total} (check --params-total/--params-active)", where=where)
    entry.update(params_total=total, params_active=active, params_source=how)
    store_checkpoint(entry, r, checkpoint_dtype, read, counted)
    note_uncounted(r, outer, counted, read, params_total)

    of = f" of {entry['hf_id']}" if entry["hf_id"] != name else ""
    entry["config_source"] = config_source or (
        f"Hugging Face config.json{of} (file {Path(path).name}, imported with planner catalog import-hf)"
    )
    entry["architecture"] = architecture
    if r.notes:
        entry["notes"] = "; ".join(r.notes)
    return validate(Model, entry, where=where)


def _refuse_not_modelled(cfg: ConfigFields, outer: Mapping[str, Any], layer_kinds: Mapping[str, int] | None) -> None:
    if layer_kinds:
        return
    for key, why in NOT_MODELLED.items():
        inner = cfg.raw.get(key)
        if inner or (cfg.raw is not outer and outer.get(key)):
            name = cfg.name(key) if inner else key
            raise InputError(
                f"{name}: {why}; planner does not model it: give --layer-kinds KIND=N,... (and --params-total) "
                "to state the layout yourself",
                where=cfg.where,
            )


def _refuse_unread_attention_keys(r: FamilyReader, outer: Mapping[str, Any]) -> None:
    """An attention-looking setting that does something and that the family does not read."""
    cfg = r.cfg
    known = HARMLESS_KEYS | r.family.layout_keys
    for key, value in cfg.raw.items():
        if key in known or key in NESTED_CONFIG_KEYS or not ATTENTION_KEY.search(key):
            continue
        if value in (None, False, 0, [], {}, ""):
            continue
        if key in REPEATED_KEYS and cfg.raw.get(REPEATED_KEYS[key]) == value:
            continue
        raise cfg.error(
            key,
            f"attention setting {_short(value)} that planner does not model for {r.model_type}; "
            "give --layer-kinds KIND=N,... (and --params-total) to state the layout yourself",
        )


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _architecture_fields(r: FamilyReader, name: str, hub_id: str | None) -> dict[str, Any]:
    cfg = r.cfg
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if cfg.has("num_key_value_heads"):
        kv_heads = cfg.integer("num_key_value_heads")
        problem = grouped_heads_problem(kv_heads, heads)
        if problem:  # here, where a nested config's key is named with its prefix
            raise InputError(f"{cfg.name('num_key_value_heads')} {kv_heads} {problem}", where=cfg.where)
    elif "num_key_value_heads" in cfg.raw and r.family.name in _NULL_KV_HEADS_IS_MHA:
        # An explicit null as its class reads it (_NULL_KV_HEADS_IS_MHA), where an absent key takes the
        # class default; the classes that keep a null (the model then does not load) get the default
        kv_heads = heads
        r.note(f"{cfg.name('num_key_value_heads')} is null: num_attention_heads ({heads}), multi-head attention")
    elif "num_key_value_heads" in r.family.defaults:
        kv_heads = r.integer("num_key_value_heads")
        if heads % kv_heads:  # Qwen2Config's 32 beside a 40-head model: the config cannot be loaded as given
            given = "null" if "num_key_value_heads" in cfg.raw else "not in the config"
            raise cfg.error("num_key_value_heads", f"{given}, and the {r.family.name} class default {kv_heads} "
                            f"does not divide num_attention_heads {heads}")
    elif r.family is _GENERIC:
        raise cfg.error("num_key_value_heads", "required field is missing (no defaults for an unknown model_type)")
    else:
        kv_heads = heads
        given = "is null" if "num_key_value_heads" in cfg.raw else "not in the config"
        r.note(f"{cfg.name('num_key_value_heads')} {given}: num_attention_heads ({heads}), multi-head attention")
    experts = _num_experts(r)
    if r.family.experts_key and not experts:
        given = next((k for k in _EXPERT_KEYS if cfg.has(k)), None)
        why = f"a {r.family.name} model routes every token to experts"
        if given is None:
            raise cfg.error(r.family.experts_key, f"required field is missing ({why})")
        raise cfg.error(given, f"{why}: expected their count, at least 1 (got {cfg.get(given)!r})")
    if cfg.has("intermediate_size") or not experts or not cfg.has("moe_intermediate_size"):
        intermediate = cfg.integer("intermediate_size")
    else:
        intermediate = cfg.integer("moe_intermediate_size")
        r.note(f"{cfg.name('intermediate_size')} not in the config: every MLP is a MoE layer, so moe_intermediate_size ({intermediate})")
    entry: dict[str, Any] = {
        "id": name,
        "hf_id": hub_id or name,
        "num_hidden_layers": r.layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate,
        "vocab_size": cfg.integer("vocab_size"),
        "max_position_embeddings": cfg.integer("max_position_embeddings"),
    }
    if "kv_lora_rank" in r.family.layout_keys:  # latent attention (DeepSeek-V2/V3): its count needs the rank
        entry["kv_lora_rank"] = cfg.integer("kv_lora_rank")
        entry["qk_rope_head_dim"] = r.integer("qk_rope_head_dim", minimum=0)
        entry["head_dim"] = r.integer("qk_nope_head_dim") + entry["qk_rope_head_dim"]
        entry["v_head_dim"] = r.integer("v_head_dim")
        r.note(
            f"MLA: head_dim = qk_nope_head_dim + qk_rope_head_dim = {entry['head_dim']}; "
            f"cache per layer = kv_lora_rank + qk_rope_head_dim; v_head_dim {entry['v_head_dim']} (prefill's values)"
        )
    elif cfg.has("head_dim") or "head_dim" in r.family.defaults:
        entry["head_dim"] = r.integer("head_dim")
    elif cfg.has("attention_head_dim"):
        entry["head_dim"] = cfg.integer("attention_head_dim")
    else:
        if hidden % heads:
            raise cfg.error(
                "head_dim",
                f"required field is missing and hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
            )
        entry["head_dim"] = hidden // heads
    if experts:
        entry["num_experts"] = experts
        per_tok = next((k for k in ("num_experts_per_tok", "experts_per_token", "top_k_experts") if cfg.has(k)), None)
        entry["num_experts_per_tok"] = cfg.integer(per_tok) if per_tok else r.integer("num_experts_per_tok")
        if entry["num_experts_per_tok"] > experts:  # else only the parameter counts would clash, later
            counted = next((cfg.name(k) for k in _EXPERT_KEYS if cfg.has(k)), f"the {r.family.name} default")
            raise cfg.error(per_tok or "num_experts_per_tok", f"{entry['num_experts_per_tok']} experts a token, more "
                            f"than the {experts} there are ({counted})")
        entry["moe_intermediate_size"] = (
            cfg.integer("moe_intermediate_size") if cfg.has("moe_intermediate_size") else entry["intermediate_size"]
        )
    return entry


_EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")  # the names configs give the count


def _num_experts(r: FamilyReader) -> int | None:
    for key in _EXPERT_KEYS:
        if r.cfg.has(key):
            return r.cfg.integer(key, minimum=0) or None
    for key in ("num_local_experts", "num_experts"):
        if key in r.family.defaults:
            return r.integer(key)
    return None


def _read_layout(r: FamilyReader) -> Layout:
    """The family's layout; a `layer_types` list the family does not read itself (transformers
    writes one into every config it saves) must agree with it."""
    layout = r.family.layout(r) if r.family.layout else Layout({"full_attention": r.layers})
    if r.cfg.has("layer_types") and "layer_types" not in r.family.layout_keys:
        listed = _nonzero(from_layer_types(r, SLIDING_NAMES))
        if listed != _nonzero(layout.layers):
            raise r.cfg.error("layer_types", f"lists {listed}, the {r.model_type} layout gives {_nonzero(layout.layers)}")
    counted = sum(layout.layers.values())
    if counted != r.layers:
        raise r.cfg.error("num_hidden_layers", f"{r.layers} layers, but the layout counts {counted}: {_nonzero(layout.layers)}")
    return layout


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def _layout_from_cli(r: FamilyReader, kinds: Mapping[str, int], state_bytes: int | None) -> Layout:
    total = sum(kinds.values())
    if total != r.layers:
        raise InputError(f"--layer-kinds: counts add to {total}, {r.cfg.name('num_hidden_layers')} is {r.layers}")
    window = r.cfg.integer("sliding_window") if kinds.get("sliding_attention") else None
    chunk = r.cfg.integer("attention_chunk_size") if kinds.get("chunked_attention") else None
    stateful = [k for k in STATE_KINDS if kinds.get(k)]
    if len(stateful) > 1:
        raise InputError("--layer-kinds: linear_attention and mamba layers in one model are not modelled")
    if stateful and not state_bytes:
        raise InputError(f"--layer-kinds: {stateful[0]} layers need --state-bytes-per-layer (their state per sequence)")
    if state_bytes and not stateful:
        raise InputError("--state-bytes-per-layer: no linear_attention or mamba layer in --layer-kinds holds a state")
    r.note(f"layer kinds given on the command line: {', '.join(f'{k}={n}' for k, n in kinds.items())}")
    return Layout(dict(kinds), sliding_window=window, attention_chunk_size=chunk, state_bytes_per_layer=state_bytes)


def _store_layout(entry: dict[str, Any], layout: Layout, r: FamilyReader) -> None:
    n = layout.layers
    if n.get("sliding_attention"):
        entry["sliding_window"] = layout.sliding_window
        entry["num_sliding_window_layers"] = n["sliding_attention"]
    if n.get("chunked_attention"):
        entry["attention_chunk_size"] = layout.attention_chunk_size
        entry["num_chunked_attention_layers"] = n["chunked_attention"]
    if n.get("sliding_attention") and n.get("chunked_attention"):
        raise InputError("sliding-window and chunked layers in one model are not modelled (one token cap per model)", where=r.cfg.where)
    entry["num_kv_shared_layers"] = n.get("kv_shared", 0)
    entry["num_cacheless_layers"] = n.get("no_cache", 0)
    for kind in STATE_KINDS:
        if n.get(kind):
            entry.update(num_state_layers=n[kind], state_layer_kind=kind, state_bytes_per_layer=layout.state_bytes_per_layer)
    if r.family is not _GENERIC and len([k for k in n if n[k]]) > 1:
        r.note("layer kinds: " + ", ".join(f"{k} {v}" for k, v in n.items() if v))


def catalog_yaml(model: Model) -> str:
    """A `--catalog` file adding the model: `models: {id: {...}}`.

    The block under `models:` has the shape of a data/models.yaml entry, with every field stated,
    those the config leaves unset as null or 0: an override merges field by field, and under a
    catalog id an entry that left them out kept the catalog model's (a BF16 gpt-oss-20b imported as
    `gpt-oss-20b` was planned with its MXFP4 checkpoint, a KV budget 88% too large; a Qwen config
    imported as gemma-2-27b kept Gemma's sliding-window layers).
    """
    header = (
        f"# Catalog entry for {model.id}, from `planner catalog import-hf`.\n"
        "# Use with --catalog FILE; the block under `models:` can go into data/models.yaml.\n"
    )
    every_field = {model.id: model.model_dump(exclude={"id"})}
    return header + yaml.safe_dump({"models": every_field}, sort_keys=False, width=1000)


def _hub_id(outer: Mapping[str, Any]) -> str | None:
    """`_name_or_path` when it is an 'org/name' Hub id rather than a local directory."""
    value = outer.get("_name_or_path")
    if isinstance(value, str) and value.count("/") == 1 and not value.startswith((".", "/", "~")):
        return value
    return None
