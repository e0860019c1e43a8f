"""Safe YAML loading and pydantic validation errors turned into one-line messages.

Every message names the file and the dotted path of the offending field, so a
planner can go straight to the line that needs fixing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError, closest
from planner.files import read_text


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with `yaml.safe_load`; broken YAML is an InputError naming the line."""
    path = Path(path)
    text = read_text(path, "YAML")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{line}invalid YAML: {problem}", where=str(path)) from None


def dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid field names at `loc` (for 'did you mean' on unknown keys)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return sorted(fields) if fields else []
        annotation = fields[part].annotation
        current = _model_in(annotation)
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def validation_message(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first validation error as 'path.to.field: problem', with 'did you mean' for unknown keys."""
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    path = dotted(loc)
    if prefix:
        path = f"{prefix}.{path}" if path != "(top level)" else prefix
    if err["type"] == "extra_forbidden":
        known = _field_names(model, loc[:-1])
        close = closest(str(loc[-1]), known)
        hint = f"; did you mean '{close}'?" if close is not None else ""
        return f"{path}: unknown key{hint} (valid keys: {', '.join(known)})"
    msg = err["msg"]
    if err["type"] == "missing":
        return f"{path}: required field is missing"
    value = err.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict | list) else ""
    return f"{path}: {msg}{shown}"


def validate(model: type[BaseModel], data: Any, *, where: str, prefix: str = "") -> Any:
    """Validate `data` as `model`; raise InputError naming `where` and the field path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_message(exc, model, prefix), where=where) from None
