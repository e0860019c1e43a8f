"""A catalog Model entry from a Hugging Face `config.json` on disk (no network): imported
exactly, or refused by name, never silently wrong.

Reading. The JSON is read directly, not through `transformers.AutoConfig` (measured as an
optional extra and rejected, see README "Importing a Hugging Face model"): AutoConfig fills
every key a config leaves out without saying so, cannot read a `model_type` newer than the
installed release, and is a large install for what amounts to reading a dictionary. Instead:
- text settings nested under `text_config`, `language_config` or `llm_config` (multimodal
  configs: Gemma 3, Llama 4, Qwen3-VL, Qwen3.5) are read there, with `tie_word_embeddings`,
  the dtype and `quantization_config` taken from the outer config when the inner one lacks
  them; every message names the nested field (`text_config.num_hidden_layers`);
- the `model_type` picks a family (planner.hf_families) that knows the layer layout, the
  parameter-count formula and the defaults of that `model_type` in the transformers release
  that introduced it; each default used is a line of the entry's notes;
- the layer kinds come from `layer_types`, a family's pattern (Gemma 2/3, gpt-oss, Llama 4's
  no_rope_layers, Qwen3-Next's full_attention_interval, Nemotron-H's hybrid_override_pattern)
  or `--layer-kinds`;
- `quantization_config` sets the checkpoint's weight dtype (fp8, MXFP4, NVFP4, int4 AWQ/GPTQ).

Refusing. An unknown `model_type`, an attention setting no family reads, a setting of an
architecture planner knows it does not model (hf_families.NOT_MODELLED), or layer counts that
disagree (layer_types against num_hidden_layers or full_attention_interval) stop the import
with exit 2, naming the field and what to give instead: `--layer-kinds` to state the layout,
`--params-total` (and `--params-active`) for the counts, `--weights` for the checkpoint files.

Parameters. With `--weights` (a model folder or its model.safetensors.index.json) they are
the checkpoint's own (planner.checkpoint), else the family's formula (planner.params);
`params_source` says which, and what the other would have said.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from planner import params
from planner.bounds import MAX_LAYERS, MAX_WIDTH
from planner.catalog import Model
from planner.checkpoint import CheckpointWeights, check_count, read_weights
from planner.errors import InputError
from planner.files import load_json
from planner.hf_families import (
    ATTENTION_KEY,
    BY_MODEL_TYPE,
    COVERED_MODEL_TYPES,
    HARMLESS_KEYS,
    LAYER_KINDS,
    NOT_MODELLED,
    SLIDING_NAMES,
    STATE_KINDS,
    Family,
    Layout,
    from_layer_types,
)
from planner.yamlio import validate

NESTED_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
# Settings a multimodal config keeps at its top level, read there when the text config lacks them.
OUTER_KEYS = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config")
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
_MISSING = object()
_GENERIC = Family("generic", (), "none: no defaults for a model_type planner does not know")


class _Config:
    """Typed access to a config's (text) fields; every problem names the file and the field."""

    def __init__(self, raw: Mapping[str, Any], where: str, *, outer: Mapping[str, Any] | None = None, prefix: str = ""):
        self.raw = raw
        self.outer = outer or {}
        self.where = where
        self.prefix = prefix

    def get(self, key: str) -> Any:
        value = self.raw.get(key)
        if value is None and key in OUTER_KEYS:
            return self.outer.get(key)
        return value

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}" if key in self.raw or key not in OUTER_KEYS else key

    def error(self, key: str, problem: str) -> InputError:
        return InputError(f"{self.name(key)}: {problem}", where=self.where)

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int = MAX_WIDTH) -> Any:
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, "required field is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer (got {value!r})")
        if value < minimum:
            raise self.error(key, f"expected an integer >= {minimum} (got {value!r})")
        if value > maximum:  # (bounds.py; also before a loop over layers runs for ever)
            digits = str(value)
            shown = digits if len(digits) <= 24 else f"{digits[:12]}... ({len(digits):,} digits)"
            raise self.error(key, f"expected an integer <= {maximum:,} (got {shown})")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false (got {value!r})")
        return value

    def text(self, key: str) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string (got {value!r})")
        return value

    def texts(self, key: str) -> list[str] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings (got {value!r})")
        return value

    def integers(self, key: str) -> list[int]:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(key, f"expected a list of integers (got {value!r})")
        return value


class _Reader:
    """A config read through its family: a missing key takes the family's default, and says so."""

    def __init__(self, cfg: _Config, family: Family, model_type: str):
        self.cfg = cfg
        self.family = family
        self.model_type = model_type
        self.notes: list[str] = []
        self.layers = cfg.integer("num_hidden_layers", maximum=MAX_LAYERS)
        dtype = cfg.text("torch_dtype") or cfg.text("dtype")
        self.dtype_bytes = DTYPE_BYTES.get(dtype) if dtype else None
        self.layout: Layout | None = None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _default(self, key: str) -> Any:
        if key not in self.family.defaults:
            return _MISSING
        value = self.family.defaults[key]
        self.note(f"{self.cfg.name(key)} not in the config: {value!r}, the {self.model_type} default ({self.family.source})")
        return value

    def integer(self, key: str, *, nullable: bool = False, minimum: int = 1) -> Any:
        """The config's value, else the family's default (noted), else an error. nullable: an
        explicit null in the config is an answer (None), not a missing key."""
        if nullable and key in self.cfg.raw and self.cfg.raw[key] is None:
            return None
        default = self._default(key) if not self.cfg.has(key) else _MISSING
        return self.cfg.integer(key, default, minimum=minimum)

    def flag(self, key: str) -> bool:
        """The config's flag, else the family's default (noted), else False: a flag the family's
        config class does not define is off in its modelling code."""
        if self.cfg.has(key):
            return self.cfg.flag(key, False)
        default = self._default(key)
        return False if default is _MISSING else bool(default)


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path`; unreadable or invalid JSON is an InputError naming the line."""
    path = Path(path)
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise InputError(f"expected a JSON object of config fields (got {type(raw).__name__})", where=str(path))
    return raw


def parse_layer_kinds(text: str) -> dict[str, int]:
    """`full_attention=12,linear_attention=36` -> counts by kind (hf_families.LAYER_KINDS)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, sep, count = part.partition("=")
        kind = kind.strip()
        if not sep or kind not in LAYER_KINDS or not count.strip().isdigit():
            raise InputError(
                f"--layer-kinds: expected KIND=COUNT,... with KIND one of {', '.join(LAYER_KINDS)} (got '{part}')"
            )
        out[kind] = out.get(kind, 0) + int(count)
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
    cfg = _text_config(outer, where)
    architectures = _Config(outer, where).texts("architectures")
    model_type = cfg.text("model_type") or _Config(outer, where).text("model_type")
    if not architectures and not model_type:
        raise cfg.error("architectures", "required field is missing (and no model_type either)")
    architecture = architectures[0] if architectures else str(model_type)

    _refuse_not_modelled(cfg, outer, layer_kinds)
    family = BY_MODEL_TYPE.get(model_type or "")
    if family is None:
        if not (layer_kinds and params_total):
            raise _Config(outer, where).error(
                "model_type",
                f"'{model_type}' is not a family planner reads (covered: {', '.join(COVERED_MODEL_TYPES)}); "
                "its layers and parameters cannot be read safely: give --layer-kinds KIND=N,... and --params-total "
                "(and --params-active for MoE) to import it anyway",
            )
        family = _GENERIC
    r = _Reader(cfg, family, model_type or architecture)
    if family is not _GENERIC and not layer_kinds:
        _refuse_unread_attention_keys(r, outer)

    entry = _architecture_fields(r, name, hf_id or _hub_id(outer))
    layout = _layout_from_cli(r, layer_kinds, state_bytes_per_layer) if layer_kinds else _read_layout(r)
    r.layout = layout
    _store_layout(entry, layout, r)

    checkpoint_dtype = _checkpoint_dtype(r)
    counted = family.count(r, entry) if family.count else None
    read = read_weights(weights, num_hidden_layers=r.layers, dtype_bytes=None if checkpoint_dtype else r.dtype_bytes) if weights else None
    if read is not None and (params_total or counted):
        reference = "--params-total" if params_total else f"planner.params ({family.name})"
        check_count(read, params_total or counted.total, reference, where=str(weights))
    total, active, how = _resolve_params(r, counted, read, params_total, params_active, bool(entry.get("num_experts")))
    if active > total:
        raise InputError(f"params_active {active} exceeds params_total {total} (check --params-total/--params-active)", where=where)
    entry.update(params_total=total, params_active=active, params_source=how)
    _store_checkpoint(entry, r, checkpoint_dtype, read, counted)
    _note_uncounted(r, outer, counted, read, params_total)

    of = f" of {entry['hf_id']}" if entry["hf_id"] != name else ""
    entry["config_source"] = config_source or (
        f"Hugging Face config.json{of} (file {Path(path).name}, imported with planner catalog import-hf)"
    )
    entry["architecture"] = architecture
    if r.notes:
        entry["notes"] = "; ".join(r.notes)
    return validate(Model, entry, where=where)


def _text_config(outer: Mapping[str, Any], where: str) -> _Config:
    """The config holding the language model's settings: a nested one when present."""
    for key in NESTED_CONFIG_KEYS:
        inner = outer.get(key)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            raise InputError(f"{key}: expected an object of the text model's settings (got {type(inner).__name__})", where=where)
        return _Config(inner, where, outer=outer, prefix=f"{key}.")
    return _Config(outer, where)


def _refuse_not_modelled(cfg: _Config, outer: Mapping[str, Any], layer_kinds: Mapping[str, int] | None) -> None:
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


def _refuse_unread_attention_keys(r: _Reader, outer: Mapping[str, Any]) -> None:
    """An attention-looking setting that does something and that the family does not read."""
    cfg = r.cfg
    known = HARMLESS_KEYS | r.family.layout_keys
    for key, value in cfg.raw.items():
        if key in known or key in NESTED_CONFIG_KEYS or not ATTENTION_KEY.search(key):
            continue
        if value in (None, False, 0, [], {}, ""):
            continue
        raise cfg.error(
            key,
            f"attention setting {_short(value)} that planner does not model for {r.model_type}; "
            "give --layer-kinds KIND=N,... (and --params-total) to state the layout yourself",
        )


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _architecture_fields(r: _Reader, name: str, hub_id: str | None) -> dict[str, Any]:
    cfg = r.cfg
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if cfg.has("num_key_value_heads"):
        kv_heads = cfg.integer("num_key_value_heads")
    elif "num_key_value_heads" in r.family.defaults:
        kv_heads = r.integer("num_key_value_heads")
    elif r.family is _GENERIC:
        raise cfg.error("num_key_value_heads", "required field is missing (no defaults for an unknown model_type)")
    else:
        kv_heads = heads
        r.note(f"{cfg.name('num_key_value_heads')} not in the config: num_attention_heads ({heads}), multi-head attention")
    experts = _num_experts(r)
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
    if cfg.has("kv_lora_rank") and "kv_lora_rank" in r.family.layout_keys:  # latent attention (DeepSeek-V2/V3)
        entry["kv_lora_rank"] = cfg.integer("kv_lora_rank")
        entry["qk_rope_head_dim"] = r.integer("qk_rope_head_dim", minimum=0)
        entry["head_dim"] = r.integer("qk_nope_head_dim") + entry["qk_rope_head_dim"]
        r.note(
            f"MLA: head_dim = qk_nope_head_dim + qk_rope_head_dim = {entry['head_dim']}; "
            "cache per layer = kv_lora_rank + qk_rope_head_dim"
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
        entry["moe_intermediate_size"] = (
            cfg.integer("moe_intermediate_size") if cfg.has("moe_intermediate_size") else entry["intermediate_size"]
        )
    return entry


def _num_experts(r: _Reader) -> int | None:
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if r.cfg.has(key):
            return r.cfg.integer(key, minimum=0) or None
    for key in ("num_local_experts", "num_experts"):
        if key in r.family.defaults:
            return r.integer(key)
    return None


def _read_layout(r: _Reader) -> Layout:
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


def _layout_from_cli(r: _Reader, kinds: Mapping[str, int], state_bytes: int | None) -> Layout:
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
    r.note(f"layer kinds given on the command line: {', '.join(f'{k}={n}' for k, n in kinds.items())}")
    return Layout(dict(kinds), sliding_window=window, attention_chunk_size=chunk, state_bytes_per_layer=state_bytes)


def _store_layout(entry: dict[str, Any], layout: Layout, r: _Reader) -> None:
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


def _checkpoint_dtype(r: _Reader) -> str | None:
    """The catalog dtype of pre-quantized weights (quantization_config), None for unquantized ones."""
    qc = r.cfg.get("quantization_config")
    if qc is None:
        return None
    key = r.cfg.name("quantization_config")
    if not isinstance(qc, dict):
        raise InputError(f"{key}: expected an object (got {qc!r})", where=r.cfg.where)
    method = qc.get("quant_method")
    if method == "fp8":
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("awq", "gptq"):
        if qc.get("bits") == 4 and qc.get("group_size") == 128:
            return "int4"
        raise InputError(
            f"{key}: {method} with bits {qc.get('bits')} / group_size {qc.get('group_size')} is not a catalog dtype "
            "(int4 is 4-bit with a 16-bit scale per 128 weights); give --weights FOLDER to read its bytes",
            where=r.cfg.where,
        )
    if method == "compressed-tensors":
        return _compressed_tensors_dtype(qc, key, r.cfg.where)
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        if algo in ("FP8", "NVFP4"):
            return "fp8" if algo == "FP8" else "fp4"
        raise InputError(f"{key}.quant_algo: '{qc.get('quant_algo')}' is not a catalog dtype (known: FP8, NVFP4)", where=r.cfg.where)
    raise InputError(
        f"{key}.quant_method: '{method}' is not a format planner knows (fp8, mxfp4, awq, gptq, compressed-tensors, modelopt); "
        "the weights' size cannot be read from it",
        where=r.cfg.where,
    )


def _compressed_tensors_dtype(qc: Mapping[str, Any], key: str, where: str) -> str:
    groups = qc.get("config_groups")
    found = set()
    for group in (groups or {}).values() if isinstance(groups, dict) else ():
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            continue
        bits, kind, size = w.get("num_bits"), w.get("type"), w.get("group_size")
        if bits == 8 and kind == "float":
            found.add("fp8")
        elif bits == 4 and kind == "float" and size == 16:
            found.add("fp4")
        elif bits == 4 and kind == "int" and size == 128:
            found.add("int4")
        else:
            raise InputError(f"{key}.config_groups: {bits}-bit {kind} weights, group {size}: not a catalog dtype", where=where)
    if len(found) != 1:
        raise InputError(f"{key}.config_groups: expected one weight format (found {sorted(found) or 'none'})", where=where)
    return found.pop()


def _resolve_params(
    r: _Reader,
    counted: params.ParamCount | None,
    read: CheckpointWeights | None,
    params_total: int | None,
    params_active: int | None,
    is_moe: bool,
) -> tuple[int, int, str]:
    """(total, active, params_source): given counts win, then the checkpoint's, then the formula's."""
    formula = f"planner.params ({r.family.name})"
    if params_total:
        given = ["--params-total"] + (["--params-active"] if params_active else [])
        if is_moe and not params_active and counted is None:
            raise r.cfg.error("num_experts_per_tok", "MoE model without a parameter-count formula: give --params-active too")
        active = params_active or (counted.active if counted and is_moe else params_total)
        other = f"; {formula} computed {counted.total:,} total / {counted.active:,} active" if counted else ""
        return params_total, active, f"{', '.join(given)} given on the command line{other}"
    if read is not None and read.params is not None:
        total = read.params
        if is_moe and not params_active:
            if counted is None:
                raise r.cfg.error("num_experts_per_tok", "MoE model without a parameter-count formula: give --params-active")
            active = total - (counted.total - counted.active)
            idle = " (active: the checkpoint's count less the idle experts of the formula)"
        else:
            active, idle = params_active or total, ""
        other = f"; {formula} computes {counted.total:,}" if counted else ""
        return total, active, f"exact: {read.source}{idle}{other}"
    if counted is None:
        unread = " (the checkpoint's packed tensors do not give it)" if read is not None else ""
        raise InputError(
            f"{r.cfg.name('model_type')}: no parameter-count formula for '{r.model_type}'{unread} "
            f"(covered: {', '.join(t for t, f in BY_MODEL_TYPE.items() if f.count)}); "
            "give --params-total (and --params-active for MoE), or --weights FOLDER with the .safetensors files",
            where=r.cfg.where,
        )
    active = params_active or counted.active
    return counted.total, active, f"computed from config.json by {formula}" + (" (--params-active given)" if params_active else "")


def _store_checkpoint(
    entry: dict[str, Any], r: _Reader, dtype: str | None, read: CheckpointWeights | None, counted: params.ParamCount | None
) -> None:
    """checkpoint_dtype and, where they are known exactly, the checkpoint's bytes."""
    if dtype:
        entry["checkpoint_dtype"] = dtype
        r.note(f"weights published in {dtype} ({r.cfg.name('quantization_config')}): the default weight dtype")
    if read is not None:
        if not dtype:
            dtype = "fp16" if r.cfg.text("torch_dtype") == "float16" or r.cfg.text("dtype") == "float16" else "bf16"
            entry["checkpoint_dtype"] = dtype
        entry["checkpoint_weight_bytes"] = read.weight_bytes
        r.note(f"checkpoint weights {read.weight_bytes:,} bytes: {read.source}")
    elif dtype == "mxfp4" and r.family.name == "gpt_oss" and counted is not None:
        expert = params.gpt_oss_routed_expert_weights(
            num_hidden_layers=r.layers, hidden_size=entry["hidden_size"],
            intermediate_size=entry["moe_intermediate_size"], num_local_experts=entry["num_experts"],
        )
        entry["checkpoint_weight_bytes"] = mxfp4_checkpoint_bytes(entry["params_total"], expert)
        r.note(
            f"checkpoint weights {entry['checkpoint_weight_bytes']:,} bytes: routed-expert matrices in MXFP4, "
            "the rest (quantization_config.modules_to_not_convert) in bf16"
        )


def mxfp4_checkpoint_bytes(params_total: int, mxfp4_params: int) -> int:
    """Bytes of a checkpoint whose `mxfp4_params` weights are MXFP4 and the rest bf16.

    MXFP4 (OCP Microscaling Formats v1.0): 32 FP4 (e2m1) values share one 8-bit E8M0 scale,
    so 32 weights take 16 + 1 = 17 bytes (4.25 bits each). gpt-oss stores its routed experts'
    gate_up and down matrices so (`*_blocks`, `*_scales`) and keeps attention, router,
    embeddings, norms and expert biases in bf16; for gpt-oss-20b this gives 13,761,264,768
    bytes, its model.safetensors.index.json total_size exactly.
    """
    if mxfp4_params % 32:
        raise ValueError("MXFP4 blocks hold 32 values: the quantized count must be a multiple of 32")
    return 2 * (params_total - mxfp4_params) + mxfp4_params // 32 * 17


def _note_uncounted(
    r: _Reader, outer: Mapping[str, Any], counted: params.ParamCount | None, read: CheckpointWeights | None, given: int | None
) -> None:
    """Lines for what the count leaves out: a vision/audio tower, a multi-token-prediction module."""
    from_formula = counted is not None and not given and (read is None or read.params is None)
    towers = [k for k in ("vision_config", "audio_config") if outer.get(k)]
    if towers and from_formula:
        r.note(f"the {' and '.join(t.removesuffix('_config') for t in towers)} tower is not counted (text model only): "
               "give --weights or --params-total to count it")
    for key in MTP_KEYS:
        if from_formula and r.cfg.get(key):
            r.note(f"{r.cfg.name(key)} = {r.cfg.get(key)}: the multi-token-prediction module is not counted "
                   "(loaded only for speculative decoding)")


def model_entry(model: Model) -> dict[str, Any]:
    """The model's fields as in data/models.yaml: id as the key, empty/None/zero fields left out."""
    fields = model.model_dump(exclude={"id"}, exclude_none=True)
    for key in (
        "num_sliding_window_layers", "num_chunked_attention_layers", "num_kv_shared_layers", "num_state_layers",
        "num_cacheless_layers", "notes", "params_source",
    ):
        if not fields.get(key):
            fields.pop(key, None)
    return {model.id: fields}


def catalog_yaml(model: Model) -> str:
    """A `--catalog` file adding the model: `models: {id: {...}}`.

    The block under `models:` has the shape of a data/models.yaml entry.
    """
    header = (
        f"# Catalog entry for {model.id}, from `planner catalog import-hf`.\n"
        "# Use with --catalog FILE; the block under `models:` can go into data/models.yaml.\n"
    )
    return header + yaml.safe_dump({"models": model_entry(model)}, sort_keys=False, width=1000)


def _hub_id(outer: Mapping[str, Any]) -> str | None:
    """`_name_or_path` when it is an 'org/name' Hub id rather than a local directory."""
    value = outer.get("_name_or_path")
    if isinstance(value, str) and value.count("/") == 1 and not value.startswith((".", "/", "~")):
        return value
    return None
