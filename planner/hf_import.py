"""A catalog Model entry from a Hugging Face `config.json` on disk (no network).

The mapping from config fields to the catalog's `Model` (planner/catalog.py):
- `head_dim` when the config has it, else `hidden_size // num_attention_heads`;
  latent attention (MLA) uses the query/key width `qk_nope_head_dim + qk_rope_head_dim`
  whatever `head_dim` says (the cache is `kv_lora_rank + qk_rope_head_dim` anyway).
- `num_key_value_heads` defaults to `num_attention_heads` (multi-head attention).
- sliding windows: `layer_types` (count of "sliding_attention") when present; else
  Gemma 2's implicit alternation (even layers local); Qwen's `use_sliding_window`
  with `max_window_layers`; else a `sliding_window` applies to every layer
  (Mistral v0.1). `sliding_window: null` or `use_sliding_window: false` means none.
- MoE: `num_local_experts` (Mixtral) / `n_routed_experts` (DeepSeek) / `num_experts`
  (Qwen-MoE), `num_experts_per_tok`, `moe_intermediate_size` (Mixtral's experts
  are `intermediate_size` wide).
- parameter counts from planner/params.py for the families it covers, else (or to
  override) given explicitly.
A malformed file is an InputError naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from planner import params
from planner.bounds import MAX_LAYERS, MAX_WIDTH
from planner.catalog import Model
from planner.errors import InputError
from planner.files import load_json
from planner.yamlio import validate

_MISSING = object()

# The architectures naming the families planner/params.py counts, and their model_type.
_ARCH_TO_MODEL_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}
# model_type of those families, in the order above (one list, so the two cannot drift apart).
COVERED_MODEL_TYPES = tuple(dict.fromkeys(_ARCH_TO_MODEL_TYPE.values()))


class _Config:
    """Typed access to a config.json's fields; every problem names the file and the field."""

    def __init__(self, raw: Mapping[str, Any], where: str):
        self.raw = raw
        self.where = where

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def error(self, key: str, problem: str) -> InputError:
        return InputError(f"{key}: {problem}", where=self.where)

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int = MAX_WIDTH) -> Any:
        value = self.raw.get(key)
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
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false (got {value!r})")
        return value

    def text(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string (got {value!r})")
        return value

    def texts(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings (got {value!r})")
        return value

    def integers(self, key: str) -> list[int]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"expected a list of integers (got {value!r})")
        return value


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path`; unreadable or invalid JSON is an InputError naming the line."""
    path = Path(path)
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise InputError(f"expected a JSON object of config fields (got {type(raw).__name__})", where=str(path))
    return raw


def model_from_hf_config(
    path: str | Path,
    *,
    name: str,
    params_total: int | None = None,
    params_active: int | None = None,
    hf_id: str | None = None,
    config_source: str | None = None,
) -> Model:
    """Build the catalog `Model` named `name` from the config.json at `path`.

    `params_total` / `params_active` override the counts of planner/params.py (and
    are required for a family it does not cover). `hf_id` defaults to the config's
    `_name_or_path` when that looks like a Hub id; `config_source` to a note naming
    the file's base name (never a machine path).
    """
    where = str(path)
    cfg = _Config(read_hf_config(path), where)

    architectures = cfg.texts("architectures")
    model_type = cfg.text("model_type")
    if not architectures and not model_type:
        raise cfg.error("architectures", "required field is missing (and no model_type either)")
    architecture = architectures[0] if architectures else str(model_type)
    family = model_type or _ARCH_TO_MODEL_TYPE.get(architecture)

    layers = cfg.integer("num_hidden_layers", maximum=MAX_LAYERS)
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads", heads)
    hub_id = hf_id or _hub_id(cfg)
    entry: dict[str, Any] = {
        "id": name,
        "hf_id": hub_id or name,
        "architecture": architecture,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": cfg.integer("intermediate_size"),
        "vocab_size": cfg.integer("vocab_size"),
        "max_position_embeddings": cfg.integer("max_position_embeddings"),
    }

    notes = []
    if cfg.has("kv_lora_rank"):  # latent attention (DeepSeek-V2/V3)
        entry["kv_lora_rank"] = cfg.integer("kv_lora_rank")
        entry["qk_rope_head_dim"] = cfg.integer("qk_rope_head_dim", minimum=0)
        entry["head_dim"] = cfg.integer("qk_nope_head_dim") + entry["qk_rope_head_dim"]
        notes.append(
            f"MLA: head_dim = qk_nope_head_dim + qk_rope_head_dim = {entry['head_dim']}; "
            f"cache per layer = kv_lora_rank + qk_rope_head_dim"
        )
    elif cfg.has("head_dim"):
        entry["head_dim"] = cfg.integer("head_dim")
    else:
        if hidden % heads:
            raise cfg.error(
                "head_dim",
                f"required field is missing and hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}",
            )
        entry["head_dim"] = hidden // heads

    window, n_sliding = _sliding_window(cfg, family, layers)
    if window:
        entry["sliding_window"] = window
        entry["num_sliding_window_layers"] = n_sliding

    num_experts = _num_experts(cfg)
    if num_experts:
        entry["num_experts"] = num_experts
        entry["num_experts_per_tok"] = cfg.integer("num_experts_per_tok")
        entry["moe_intermediate_size"] = cfg.integer("moe_intermediate_size", entry["intermediate_size"])

    counted = _count_params(cfg, family, entry)
    total, active, how = _resolve_params(cfg, family, counted, params_total, params_active, bool(num_experts))
    if active > total:
        raise InputError(f"params_active {active} exceeds params_total {total} (check --params-total/--params-active)", where=where)
    entry["params_total"] = total
    entry["params_active"] = active
    entry["params_source"] = how
    of = f" of {hub_id}" if hub_id else ""
    entry["config_source"] = config_source or (
        f"Hugging Face config.json{of} (file {Path(path).name}, imported with planner catalog import-hf)"
    )
    if notes:
        entry["notes"] = "; ".join(notes)
    return validate(Model, entry, where=where)


def model_entry(model: Model) -> dict[str, Any]:
    """The model's fields as in data/models.yaml: id as the key, empty/None fields left out."""
    fields = model.model_dump(exclude={"id"}, exclude_none=True)
    for key in ("num_sliding_window_layers", "notes", "params_source"):
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


def _hub_id(cfg: _Config) -> str | None:
    """`_name_or_path` when it is an 'org/name' Hub id rather than a local directory."""
    value = cfg.raw.get("_name_or_path")
    if isinstance(value, str) and value.count("/") == 1 and not value.startswith((".", "/", "~")):
        return value
    return None


def _sliding_window(cfg: _Config, family: str | None, layers: int) -> tuple[int | None, int]:
    """(window in tokens, number of layers whose cache it caps), or (None, 0)."""
    layer_types = cfg.texts("layer_types")
    if layer_types is not None and len(layer_types) != layers:
        raise cfg.error("layer_types", f"has {len(layer_types)} entries for num_hidden_layers {layers}")
    window = cfg.integer("sliding_window", None) if cfg.flag("use_sliding_window", True) else None
    if layer_types is not None:
        count = layer_types.count("sliding_attention")
        if count and window is None:
            raise cfg.error("sliding_window", "required by layer_types 'sliding_attention' but missing")
    elif window is None:
        count = 0
    elif family == "gemma2":
        count = (layers + 1) // 2  # transformers Gemma2: layer i is local when i is even
    elif family in ("qwen2", "qwen3", "qwen3_moe") and cfg.has("use_sliding_window"):
        count = layers - min(layers, cfg.integer("max_window_layers", layers, minimum=0))
    else:
        count = layers  # Mistral v0.1: every layer attends within the window
    return (window, count) if window and count else (None, 0)


def _num_experts(cfg: _Config) -> int | None:
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if cfg.has(key):
            n = cfg.integer(key, minimum=0)
            return n or None
    return None


def _count_params(cfg: _Config, family: str | None, e: dict[str, Any]) -> params.ParamCount | None:
    """planner/params.py's count for a covered family, else None."""
    common = {
        "num_hidden_layers": e["num_hidden_layers"],
        "hidden_size": e["hidden_size"],
        "num_attention_heads": e["num_attention_heads"],
        "vocab_size": e["vocab_size"],
    }
    tied = cfg.flag("tie_word_embeddings", family == "gemma2")
    gqa = {**common, "num_key_value_heads": e["num_key_value_heads"], "head_dim": e["head_dim"]}
    if family in ("llama", "mistral", "qwen2", "qwen3"):
        attention_bias = cfg.flag("attention_bias", False)
        return params.dense_decoder_params(
            **gqa,
            intermediate_size=e["intermediate_size"],
            tie_word_embeddings=tied,
            qkv_bias=attention_bias or family == "qwen2",  # Qwen2 always biases q, k, v
            o_bias=attention_bias,
            mlp_bias=cfg.flag("mlp_bias", False),
            qk_norm=family == "qwen3",
        )
    if family == "gemma2":
        return params.gemma2_params(**gqa, intermediate_size=e["intermediate_size"])
    if family in ("mixtral", "qwen3_moe") and e.get("num_experts"):
        moe_layers = None
        if family == "qwen3_moe":
            step = cfg.integer("decoder_sparse_step", 1)
            dense_only = set(cfg.integers("mlp_only_layers"))
            moe_layers = sum(
                1 for i in range(e["num_hidden_layers"]) if i not in dense_only and (i + 1) % step == 0
            )
        return params.moe_decoder_params(
            **gqa,
            moe_intermediate_size=e["moe_intermediate_size"],
            num_experts=e["num_experts"],
            num_experts_per_tok=e["num_experts_per_tok"],
            tie_word_embeddings=tied,
            qk_norm=family == "qwen3_moe",
            num_moe_layers=moe_layers,
            dense_intermediate_size=e["intermediate_size"],
        )
    if family in ("deepseek_v2", "deepseek_v3") and e.get("kv_lora_rank") and e.get("num_experts"):
        return params.deepseek_mla_moe_params(
            **common,
            q_lora_rank=cfg.integer("q_lora_rank", None),
            kv_lora_rank=e["kv_lora_rank"],
            qk_nope_head_dim=cfg.integer("qk_nope_head_dim"),
            qk_rope_head_dim=e["qk_rope_head_dim"],
            v_head_dim=cfg.integer("v_head_dim"),
            intermediate_size=e["intermediate_size"],
            moe_intermediate_size=e["moe_intermediate_size"],
            n_routed_experts=e["num_experts"],
            n_shared_experts=cfg.integer("n_shared_experts", 0, minimum=0),
            num_experts_per_tok=e["num_experts_per_tok"],
            first_k_dense_replace=cfg.integer("first_k_dense_replace", 0, minimum=0),
            tie_word_embeddings=tied,
            router_bias=cfg.text("topk_method") == "noaux_tc",
        )
    return None


def _resolve_params(
    cfg: _Config,
    family: str | None,
    counted: params.ParamCount | None,
    params_total: int | None,
    params_active: int | None,
    is_moe: bool,
) -> tuple[int, int, str]:
    """(total, active, params_source): given counts win over computed ones.

    A dense model's active count is its total; an MoE model's comes from --params-active
    or, failing that, from planner/params.py.
    """
    given = [flag for flag, v in (("--params-total", params_total), ("--params-active", params_active)) if v]
    if counted is None:
        if params_total is None:
            raise cfg.error(
                "model_type",
                f"no parameter-count formula for '{family}' (covered: {', '.join(COVERED_MODEL_TYPES)}); "
                "give --params-total (and --params-active for MoE)",
            )
        if is_moe and params_active is None:
            raise cfg.error("num_experts_per_tok", "MoE model of an uncovered family: give --params-active too")
        return params_total, params_active or params_total, f"given on the command line ({', '.join(given)})"
    total = params_total or counted.total
    if params_active:
        active = params_active
    elif is_moe or params_total is None:
        active = counted.active
    else:
        active = total
    if not given:
        return total, active, f"computed from config.json by planner.params ({family})"
    return total, active, (
        f"{', '.join(given)} given on the command line; planner.params computed "
        f"{counted.total} total / {counted.active} active"
    )
