"""A Hugging Face config.json read as typed fields: the file, the text model's settings (nested
under `text_config`, `language_config` or `llm_config` in multimodal configs, with a few read
from the outer config when the inner one lacks them), and a reader that fills a missing key with
its family's default and notes it. Every problem names the file and the field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from planner.bounds import MAX_LAYERS, MAX_WIDTH
from planner.errors import InputError
from planner.files import load_json
from planner.hf_families import Family
from planner.hf_layouts import BLOCK_LIST_TEXT, Layout

NESTED_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
# Settings a multimodal config keeps at its top level, read there when the text config lacks them.
OUTER_KEYS = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config")
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
_MISSING = object()


def _list_of(value: Any, kind: type) -> bool:
    """A list whose items are all `kind` (true and false are not integers here)."""
    return isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value)


class ConfigFields:
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

    def _checked(self, key: str, ok: Callable[[Any], bool], expected: str) -> Any:
        """The config's value of `key` (None when absent) when `ok` accepts it, else an error
        saying what was expected."""
        value = self.get(key)
        if value is not None and not ok(value):
            raise self.error(key, f"expected {expected} (got {value!r})")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._checked(key, lambda v: isinstance(v, bool), "true or false")
        return default if value is None else value

    def text(self, key: str) -> str | None:
        return self._checked(key, lambda v: isinstance(v, str), "a string")

    def texts(self, key: str) -> list[str] | None:
        return self._checked(key, lambda v: _list_of(v, str), "a list of strings")

    def integers(self, key: str) -> list[int]:
        value = self._checked(key, lambda v: _list_of(v, int), "a list of integers")
        return [] if value is None else value


class FamilyReader:
    """A config read through its family: a missing key takes the family's default, and says so."""

    def __init__(self, cfg: ConfigFields, family: Family, model_type: str):
        self.cfg = cfg
        self.family = family
        self.model_type = model_type
        self.notes: list[str] = []
        if not cfg.has("num_hidden_layers") and cfg.has("layers_block_type"):
            # Nemotron-3's configs list their blocks instead of counting them; said, rather than "missing"
            raise cfg.error("num_hidden_layers", f"required field is missing: {BLOCK_LIST_TEXT} (Nemotron-H's "
                            "hybrid_override_pattern it does)")
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
        given = "null" if key in self.cfg.raw else "not in the config"  # an explicit null the class keeps
        self.note(f"{self.cfg.name(key)} {given}: {value!r}, the {self.model_type} default ({self.family.source})")
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


def text_config(outer: Mapping[str, Any], where: str) -> ConfigFields:
    """The config holding the language model's settings: a nested one when present."""
    for key in NESTED_CONFIG_KEYS:
        inner = outer.get(key)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            raise InputError(f"{key}: expected an object of the text model's settings (got {type(inner).__name__})", where=where)
        return ConfigFields(inner, where, outer=outer, prefix=f"{key}.")
    return ConfigFields(outer, where)
