"""Safe YAML loading and pydantic validation errors turned into one-line messages.

Every message names the file and the dotted path of the offending field, so a
planner can go straight to the line that needs fixing.

The loader is PyYAML's safe loader with the checks a hostile or mistaken file needs: a key
given twice in one mapping is an error (YAML says keys are unique; PyYAML keeps the last
silently); nesting is at most MAX_DEPTH levels (deeper, PyYAML's recursive composer
overflows the stack); aliases may not expand the document past MAX_EXPANDED_VALUES values
(a "billion laughs" bomb is a few lines that expand to gigabytes once anything walks it)
nor refer to themselves; a number in a YAML 1.1 form that reads as something else (036 is
octal 30, 1:30 is 90 in base 60, 0x1E is 30) is refused; and a value PyYAML cannot build (a 5,000-digit integer, the
date 2027-13-45) is an error naming its line.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from planner.errors import InputError, closest, shorten, shown_value
from planner.files import read_text

MAX_DEPTH = 64  # scenarios and catalogs nest 5 levels deep
MAX_EXPANDED_VALUES = 1_000_000  # the built-in catalog is about 2,000
MAX_YAML_BYTES = 16 * 2**20
_MERGE_TAG = "tag:yaml.org,2002:merge"


_NULL_KEY = "a null key (~, null, or nothing before the colon): give the key's name"


class _ValueChecks:
    """The constructor's checks (keys given twice, values PyYAML cannot build, YAML 1.1 number
    forms), for a loader of either parser."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # int('1' * 5000), date(2027, 13, 45)
            value = shorten(str(getattr(node, "value", "")), 40)
            raise ConstructorError(
                None, None, f"cannot read the value '{value}': {str(exc).split(';')[0]}", node.start_mark
            ) from None

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # '<<: *base' merges; keys given here override the merged ones
                key = self.construct_object(key_node, deep=True)
                if key is None:  # pydantic would name it 'None', with no line
                    raise ConstructorError(None, None, _NULL_KEY, key_node.start_mark)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: PyYAML's own error follows
                if first is not key_node:
                    raise ConstructorError(
                        None, None,
                        f"key '{key}' appears twice in one mapping (first on line {first.start_mark.line + 1})",
                        key_node.start_mark,
                    )
        mapping = super().construct_mapping(node, deep=deep)
        if None in mapping:  # merged in ('<<: {~: 1}'): the mapping's own line
            raise ConstructorError(None, None, _NULL_KEY + " (merged in with <<)", node.start_mark)
        return mapping


class _Loader(_ValueChecks, yaml.SafeLoader):
    """yaml.SafeLoader with the checks in the module docstring."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Node:
        node = super().compose_document()
        _check_expansion(node)
        return node


# libyaml's parser (about ten times faster), for the built-in catalog only: it is the project's
# own data, read by every command, and needs no guard against hostile nesting or aliases, which
# the C composer does not let a subclass check.
_BuiltinLoader = type("_BuiltinLoader", (_ValueChecks, yaml.CSafeLoader), {}) if hasattr(yaml, "CSafeLoader") else _Loader


def _number_form_problem(text: str, integer: bool) -> str | None:
    """Why a YAML 1.1 number form would be read as something other than what it looks like:
    PyYAML reads 036 as octal 30, 02000 as 1024, 1:30 as base 60 (90) and 0x1E as 30."""
    digits = text.lstrip("+-").replace("_", "")
    if ":" in digits:
        return "is a base-60 number in YAML 1.1 (1:30 reads as 90); write it in decimal, or quote it"
    if digits[:2].lower() in ("0x", "0b"):
        return "is hexadecimal or binary; write it in decimal"
    if integer and len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        return "has a leading zero, which YAML 1.1 reads as octal (036 is 30); write it without the zero"
    return None


def _construct_number(loader: yaml.BaseLoader, node: Node) -> Any:
    problem = _number_form_problem(str(node.value), node.tag.endswith(":int"))
    if problem:
        raise ConstructorError(None, None, f"'{shorten(str(node.value), 40)}' {problem}", node.start_mark)
    constructor = yaml.SafeLoader.yaml_constructors[node.tag]
    return constructor(loader, node)


# Tags that build what no field of a scenario or catalog holds, which pydantic would read as
# something else: !!binary bytes decoded into text (`name: !!binary aGVsbG8=` named a report hello.md),
# a !!set's keys as a list in hash order, !!omap and !!pairs as lists of pairs.
_REFUSED_TAGS = {"binary": "text or a number", "set": "a list", "omap": "a mapping", "pairs": "a mapping"}


def _refuse_tag(loader: yaml.BaseLoader, node: Node) -> Any:
    kind = node.tag.rsplit(":", 1)[-1]
    raise ConstructorError(None, None, f"a !!{kind} value where {_REFUSED_TAGS[kind]} belongs; write it as "
                           f"{_REFUSED_TAGS[kind]}", node.start_mark)


for _loader in {_Loader, _BuiltinLoader}:
    _loader.add_constructor("tag:yaml.org,2002:int", _construct_number)
    _loader.add_constructor("tag:yaml.org,2002:float", _construct_number)
    for _kind in _REFUSED_TAGS:
        _loader.add_constructor(f"tag:yaml.org,2002:{_kind}", _refuse_tag)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: Node | None) -> None:
    """Refuse a node graph whose aliases expand it past MAX_EXPANDED_VALUES values or
    MAX_DEPTH levels, or refer back to themselves. Memoised by node, so linear in the text."""
    if root is None:
        return
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    expanding: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            expanding.discard(key)
            if size[key] > MAX_EXPANDED_VALUES:
                raise ComposerError(
                    None, None, f"aliases expand this to more than {MAX_EXPANDED_VALUES:,} values", node.start_mark
                )
            if depth[key] > MAX_DEPTH:
                raise ComposerError(None, None, f"aliases nest this deeper than {MAX_DEPTH} levels", node.start_mark)
            continue
        if key in size:
            continue
        if key in expanding:
            raise ComposerError(None, None, "an alias refers to the value that contains it", node.start_mark)
        expanding.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def parse_yaml(text: str, where: str, *, builtin: bool = False) -> Any:
    """The YAML document in `text`; any problem is an InputError naming `where` and the line.
    builtin: the project's own data file (read with libyaml where PyYAML has it)."""
    try:
        return yaml.load(text, Loader=_BuiltinLoader if builtin else _Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        if context and problem.startswith("but "):  # half a sentence alone: "but found another document"
            problem = f"{context}, {problem}"
        raise InputError(f"{line}invalid YAML: {problem}", where=where) from None


def load_yaml(path: str | Path, *, builtin: bool = False) -> Any:
    """Read a YAML file safely (see the module docstring); broken YAML is an InputError naming the line.
    builtin: the project's own data file (parse_yaml)."""
    path = Path(path)
    return parse_yaml(read_text(path, "YAML", max_bytes=MAX_YAML_BYTES), str(path), builtin=builtin)


def dotted(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a path: 'gpus[0].id'; a mapping's key that is itself wrong (pydantic
    puts '[key]' after it) as 'inventory.null (as a key)', not 'inventory.None.[key]'."""
    out = ""
    for i, part in enumerate(loc):
        if part == "[key]":
            out += " (as a key)"
        elif isinstance(part, int) and loc[i + 1:i + 2] != ("[key]",):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + ("null" if part is None else str(part))
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


def _union_members(annotation: Any) -> list[Any]:
    """The members of a union annotation (None left out)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return [annotation]
    return [a for a in typing.get_args(annotation) if a is not type(None)]


def _tag_positions(model: type[BaseModel], loc: tuple[Any, ...]) -> dict[int, list[Any]]:
    """Indices of `loc` that name a member of a union (pydantic's 'str', 'GPUCandidate',
    'list[str]'), not a field: the user never wrote them, so messages leave them out. Each
    index maps to the union's members."""
    tags: dict[int, list[Any]] = {}
    annotation: Any = model
    for i, part in enumerate(loc):
        if annotation is None:
            break
        members = _union_members(annotation)  # (an Optional[X] is X: pydantic names no member)
        if len(members) > 1 and isinstance(part, str):
            tags[i] = members
            named = [m for m in members if getattr(m, "__name__", None) == part]
            annotation = named[0] if named else None
            continue
        annotation = members[0] if members else None
        fields = getattr(annotation, "model_fields", None)
        if fields is not None and isinstance(part, str):
            annotation = fields[part].annotation if part in fields else None
        elif typing.get_origin(annotation) in (list, tuple) and isinstance(part, int):
            annotation = (typing.get_args(annotation) or (None,))[0]
        elif typing.get_origin(annotation) is dict:
            annotation = (typing.get_args(annotation) or (None, None))[-1]
        else:
            annotation = None
    return tags


def _chosen_error(exc: ValidationError, model: type[BaseModel]) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The error to report, and its location without union-member names.

    The first error, except where it comes from a union: pydantic then reports every member
    that failed (a mapping under `gpus:` fails as 'str' and as 'GPUCandidate'), and the
    member that got furthest (the longest location) is the one the user meant; when none got
    past the value itself, the value is none of them (a 'union' error naming them all). And a
    required field reported missing beside an unknown key that looks like it is a typo: the
    unknown key is reported.
    """
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    tags = _tag_positions(model, loc)
    if tags:
        union_at = min(tags)
        rivals = [e for e in errors if tuple(e["loc"])[:union_at] == loc[:union_at] and len(e["loc"]) > union_at]
        first = max(rivals, key=lambda e: len(e["loc"]))  # max keeps the first of equals
        if len(first["loc"]) == union_at + 1:
            return {"type": "union", "members": tags[union_at], "input": first.get("input")}, loc[:union_at]
        loc = tuple(first["loc"])
        tags = _tag_positions(model, loc)
    if first["type"] == "missing":
        typo = next((e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"])[:-1] == loc[:-1]
                     and closest(str(e["loc"][-1]), [str(loc[-1])]) is not None), None)  # fmt: skip
        if typo is not None:
            first, loc = typo, tuple(typo["loc"])
    return first, tuple(part for i, part in enumerate(loc) if i not in tags)


def _kind(member: Any) -> str:
    """What a union member accepts, in a user's words."""
    if typing.get_origin(member) is typing.Annotated:
        member = typing.get_args(member)[0]
    fields = getattr(member, "model_fields", None)
    if fields is not None:
        return f"a mapping with keys {', '.join(sorted(fields))}"
    kinds = {str: "a string", dict: "a mapping", list: "a list", int: "an integer", float: "a number", bool: "true or false"}
    return kinds.get(typing.get_origin(member) or member, str(member))


_UNITS = {"_ms": ("milliseconds", 1e-3), "_s": ("seconds", 1.0)}


def _unit(key: str) -> str | None:
    return next((suffix for suffix in _UNITS if key.endswith(suffix)), None)


def _unit_hint(typed: str, close: str, value) -> str:
    """Where the key suggested takes another unit than the one typed (ttft_ms for ttft_s), the value
    in its unit: followed as written, the hint would read 2000 ms as 2000 s."""
    have, want = _unit(typed), _unit(close)
    if have is None or want is None or have == want or typed[: -len(have)] != close[: -len(want)]:
        return ""
    said = f" It is in {_UNITS[want][0]}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        said += f": {close}: {value * _UNITS[have][1] / _UNITS[want][1]:g}"
    return said + "."


def validation_message(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first validation error as 'path.to.field: problem', with 'did you mean' for unknown keys."""
    err, loc = _chosen_error(exc, model)
    if loc[-1:] == ("[key]",) and err.get("input") is None:  # pydantic writes a null key as the text 'None'
        loc = (*loc[:-2], None, "[key]")
    path = dotted(loc)
    if prefix:
        path = f"{prefix}.{path}" if path != "(top level)" else prefix
    if err["type"] == "extra_forbidden":
        known = _field_names(model, loc[:-1])
        close = closest(str(loc[-1]), known)
        hint = f"; did you mean '{close}'?{_unit_hint(str(loc[-1]), close, err.get('input'))}" if close is not None else ""
        return f"{path}: unknown key{hint} (valid keys: {', '.join(known)})"
    value = err.get("input")
    shown = f" (got {shown_value(value)})" if value is not None and not isinstance(value, dict | list) else ""
    if err["type"] == "union":
        got = f" (got a {type(value).__name__})" if isinstance(value, dict | list) else shown or " (got null)"
        return f"{path}: expected {' or '.join(_kind(m) for m in err['members'])}{got}"
    msg = err["msg"]
    if err["type"] == "missing":
        return f"{path}: required field is missing"
    if err["type"] == "model_type":  # pydantic names the class ('instance of TrafficSpec'), which no file states
        got = f" (got a {type(value).__name__})" if isinstance(value, list) else shown or " (got null)"
        return f"{path}: expected a mapping of keys{got}"
    if err["type"] == "value_error":  # a check of ours: pydantic's "Value error, " says nothing to a reader
        msg = msg.removeprefix("Value error, ")
        if path == "(top level)":  # a check across fields: its message names the fields itself
            return msg
        own = dotted(loc)  # the path as the model sees it, which a check's message names
        if msg.startswith((f"{own}[", f"{own}.")):  # a list's check naming the entry: 'gpus[1]: ...'
            return f"{prefix}.{msg}" if prefix else msg
    if shown and msg.endswith(shown):  # a check of ours that already says what it got
        shown = ""
    return f"{path}: {msg}{shown}"


def validate(model: type[BaseModel], data: Any, *, where: str, prefix: str = "") -> Any:
    """Validate `data` as `model`; raise InputError naming `where` and the field path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_message(exc, model, prefix), where=where) from None
