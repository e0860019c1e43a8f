"""Weights of a published checkpoint, counted from its safetensors files (no network, no tensor data read).

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming
every tensor's dtype, shape and byte range (github.com/huggingface/safetensors, README "Format").
That header is all this module needs, so it reads it directly: the `safetensors` package would
add a compiled dependency to parse eight bytes and a JSON object, and it reads the same header.

Two inputs, two levels of exactness:
- the `.safetensors` files (a model folder: those its index names, where it has one): every
  tensor's dtype and shape, so the bytes and the element counts are exact, and tensors the
  engine does not serve (a multi-token-prediction layer) can be left out by name;
- `model.safetensors.index.json` alone: `metadata.total_size` is the bytes of every tensor
  (bytes, not parameters: a bf16 weight is 2 of them, an fp8 weight 1), and the weight map
  names the tensors but not their sizes. Parameters follow only when every tensor has the
  config's dtype; tensors to leave out can be named but not subtracted.
Packed tensors (integer dtypes holding several 4-bit values, as MXFP4 blocks or GPTQ qweight)
make elements differ from parameters: their bytes count, their elements do not.

Checking. A header is read only as far as the format allows (the reference reader,
huggingface/safetensors `tensor.rs`, Metadata::validate and read_metadata): every entry
has a known dtype, a shape of whole numbers >= 0 and two offsets `begin <= end`; the bytes
between them are the shape's elements times the dtype's size; sorted by offset, the
tensors follow one another from byte 0 and the last one ends where the file does. Anything
else is refused naming the file and the tensor. What the files hold must then agree with
the model the config describes (`check_count`): a header can be self-consistent and still
belong to another model, or to none.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.bounds import MAX_PARAMS
from planner.errors import InputError, shorten
from planner.files import load_json

INDEX_NAME = "model.safetensors.index.json"
# The reference reader refuses a header longer than 100,000,000 bytes; an index names the
# same tensors (a 1T-parameter model's index is about 10 MB).
MAX_HEADER_BYTES = 100_000_000

# Bytes per element of the safetensors dtypes whose elements are parameters.
FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
# Integer and sub-byte dtypes: quantized blocks, packed weights, scales; bytes count, elements are not parameters.
PACKED_BYTES = {"I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E8M0": 1}
DTYPE_BYTES = FLOAT_BYTES | PACKED_BYTES
_SCALE_SUFFIXES = ("_scale", "_scale_inv", "_scales", "scales", "_zeros", "zero_point", "_amax")
_DECODER_LAYER = re.compile(r"(?:^|\.)model\.(?:language_model\.)?layers\.(\d+)\.")

# How far a checkpoint may stray from the parameter count of its config (check_count).
# More: a checkpoint may hold what the count leaves out, a vision or audio tower and its
# projector (medgemma-27b-it's index: 1.6% over the text model), a multi-token-prediction
# module read through an index (DeepSeek-V3: 14B over 671B). In the families import-hf
# reads, no tower is as large as the language model it serves.
MAX_CHECKPOINT_SHARE = 2.0
# Less: a checkpoint holds the whole language model its config describes, and the formulas
# count it exactly (they match the three real indices of text models to the parameter):
# 10% short is whole matrices missing, the weights of another model (a smaller sibling, a
# pruned copy), not a rounding of the formula.
MIN_CHECKPOINT_SHARE = 0.9
# Bytes a weight can take: the narrowest format import-hf reads from a quantization_config
# (int4, MXFP4, NVFP4) stores 4 bits a weight before its scales; the widest safetensors
# float any checkpoint uses for weights is F32 (4 bytes).
MIN_WEIGHT_BYTES = 0.5
MAX_WEIGHT_BYTES = 4.0


@dataclass(frozen=True)
class CheckpointWeights:
    """What a checkpoint's files hold, after leaving out tensors the engine does not serve."""

    weight_bytes: int
    params: int | None  # None when packed tensors or mixed dtypes make it unknowable from these files
    tensors: int
    excluded: tuple[str, ...]  # names left out (multi-token-prediction layers)
    excluded_bytes: int | None  # None when only the index was read (names without sizes)
    source: str  # one line: what was read and how exact it is


def not_served(name: str, num_hidden_layers: int) -> bool:
    """A multi-token-prediction tensor: `mtp.*` (Qwen3-Next, MiMo) or a decoder layer past
    num_hidden_layers (DeepSeek-V3 and GLM-4.5 store theirs as layer 61 / 92). vLLM loads them
    only for speculative decoding, so a served model's weights leave them out."""
    if name.startswith("mtp.") or ".mtp." in name or ".mtp_layers." in name:
        return True
    m = _DECODER_LAYER.search(name)
    return bool(m) and "vision" not in name and "visual" not in name and int(m.group(1)) >= num_hidden_layers


def read_weights(path: str | Path, *, num_hidden_layers: int, dtype_bytes: float | None) -> CheckpointWeights:
    """The weights at `path`: a model folder (the .safetensors files its index names, every one
    there without an index, else the index alone), an index file, or one .safetensors file.
    `dtype_bytes` is the config's dtype (2 for bf16), used to turn an index's total_size into
    parameters when no tensor header is at hand (None: pre-quantized)."""
    path = Path(path)
    if path.is_dir():
        index = path / INDEX_NAME
        files = _indexed_shards(index) if index.is_file() else None
        if files is None:  # no index (or one without a weight map): every file there
            files = sorted(path.glob("*.safetensors"))
        if files:
            return _from_headers(files, num_hidden_layers)
        if index.is_file():
            return _from_index(index, num_hidden_layers, dtype_bytes)
        raise InputError(f"no .safetensors file and no {INDEX_NAME} in the folder", where=str(path))
    if path.name.endswith(".safetensors"):
        return _from_headers([path], num_hidden_layers)
    if path.is_file():
        return _from_index(path, num_hidden_layers, dtype_bytes)
    raise InputError("file not found", where=str(path))


def _indexed_shards(index: Path) -> list[Path] | None:
    """The .safetensors files of the folder that the index's weight_map names: a folder may hold the
    same weights twice (Mistral's repositories ship consolidated.safetensors beside the transformers
    shards, 47 GB each for Devstral-Small-2507), and counting every file there read them at twice the
    weights (vLLM too loads the indexed shards alone). [] where the folder holds no .safetensors file
    (the index is then read on its own); None: an index without a weight map. A shard the folder
    lacks is refused, naming it: the files there would count another set of weights."""
    raw = load_json(index, "safetensors index", max_bytes=MAX_HEADER_BYTES)
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return None
    for tensor, name in weight_map.items():
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"weight_map: {shorten(json.dumps(tensor))} names no file "
                             f"(got {shorten(json.dumps(name))})", where=str(index))
    present = {p.name: p for p in index.parent.glob("*.safetensors")}
    if not present:
        return []
    names = sorted(set(weight_map.values()))
    missing = [name for name in names if name not in present]
    if missing:
        raise InputError(f"weight_map names {len(missing)} shard(s) the folder lacks ({shorten(', '.join(missing))}); "
                         "give the folder with every shard, or the index alone", where=str(index))
    return [present[name] for name in names]


def safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of one .safetensors file (its first 8 + n bytes) and the bytes of
    tensor data after it."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError("not a safetensors file (shorter than its 8-byte header length)", where=str(path))
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise InputError(f"not a safetensors file (header length {n:,} bytes in a file of {size:,})", where=str(path))
            raw = f.read(n)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from None
    try:
        header = json.loads(raw)
    except RecursionError:
        raise InputError("not a safetensors file (its header is JSON nested too deeply)", where=str(path)) from None
    except ValueError:  # invalid JSON or UTF-8, an integer past Python's 4,300 digits
        raise InputError("not a safetensors file (its header is not JSON)", where=str(path)) from None
    if not isinstance(header, dict):
        raise InputError("not a safetensors file (its header is not a JSON object)", where=str(path))
    return header, size - 8 - n


@dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: str
    elements: int
    begin: int
    end: int


def _tensor(name: str, info: Any, file: Path) -> _Tensor:
    """One header entry, checked as the reference reader checks it (module docstring)."""

    def bad(problem: str) -> InputError:
        return InputError(f"tensor '{shorten(name)}': {problem}", where=str(file))

    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise bad("header entry lacks dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise bad(f"unknown safetensors dtype {shorten(json.dumps(dtype))}")
    if not isinstance(shape, list) or not all(_whole(d) for d in shape):
        raise bad(f"shape: expected a list of integers >= 0 (got {shorten(json.dumps(shape))})")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(o) for o in offsets):
        raise bad(f"data_offsets: expected [begin, end], two integers >= 0 (got {shorten(json.dumps(offsets))})")
    begin, end = offsets
    if end < begin:
        raise bad(f"data_offsets: end {_count(end)} is before begin {_count(begin)}")
    elements = math.prod(shape)
    if end - begin != elements * DTYPE_BYTES[dtype]:
        raise bad(
            f"{_count(end - begin)} bytes for {_count(elements)} {dtype} elements (shape {shorten(json.dumps(shape))} "
            f"takes {_count(elements * DTYPE_BYTES[dtype])} bytes)"
        )
    return _Tensor(name, dtype, elements, begin, end)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(n: int) -> str:
    """`n` with thousands separators, or its magnitude when it is too long to read."""
    return f"{n:,}" if n < 10**30 else f"about 2^{n.bit_length() - 1}"


def _file_tensors(file: Path) -> list[_Tensor]:
    """The tensors of one file, in the order of their bytes, which must tile its data exactly."""
    header, data_bytes = safetensors_header(file)
    tensors = sorted(
        (_tensor(name, info, file) for name, info in header.items() if name != "__metadata__"),
        key=lambda t: (t.begin, t.end, t.name),
    )
    at = 0
    for t in tensors:
        if t.begin != at:
            what = "overlaps the tensor before it" if t.begin < at else "leaves a gap after the tensor before it"
            raise InputError(
                f"tensor '{shorten(t.name)}': data_offsets [{_count(t.begin)}, {_count(t.end)}] {what} (expected "
                f"to begin at byte {_count(at)}: the tensors' bytes follow one another)",
                where=str(file),
            )
        at = t.end
    if at != data_bytes:
        raise InputError(
            f"the header's tensors take {_count(at)} bytes, the file holds {data_bytes:,} after its header "
            "(a truncated or padded file)",
            where=str(file),
        )
    return tensors


def _from_headers(files: list[Path], num_hidden_layers: int) -> CheckpointWeights:
    weight_bytes = params = tensors = excluded_bytes = 0
    exact_params = True
    excluded: list[str] = []
    for file in files:
        for t in _file_tensors(file):
            size = t.end - t.begin
            if not_served(t.name, num_hidden_layers):
                excluded.append(t.name)
                excluded_bytes += size
                continue
            tensors += 1
            weight_bytes += size
            if t.dtype in PACKED_BYTES:
                exact_params = False
            elif not t.name.endswith(_SCALE_SUFFIXES):
                params += t.elements
    what = f"{tensors:,} tensors in {len(files)} safetensors file(s) (headers read)"
    if excluded:
        what += f"; {len(excluded)} multi-token-prediction tensors ({excluded_bytes:,} bytes) left out"
    return CheckpointWeights(
        weight_bytes=weight_bytes,
        params=params if exact_params else None,
        tensors=tensors,
        excluded=tuple(excluded),
        excluded_bytes=excluded_bytes,
        source=what,
    )


def _from_index(index: Path, num_hidden_layers: int, dtype_bytes: float | None) -> CheckpointWeights:
    where = str(index)
    raw = load_json(index, "safetensors index", max_bytes=MAX_HEADER_BYTES)
    metadata = raw.get("metadata") if isinstance(raw, dict) else None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(metadata, dict) or not isinstance(weight_map, dict):
        raise InputError("not a safetensors index (needs 'metadata' and 'weight_map')", where=where)
    total = metadata.get("total_size")
    if isinstance(total, bool) or not isinstance(total, int) or not 0 < total <= MAX_PARAMS:
        shown = _count(total) if isinstance(total, int) and not isinstance(total, bool) else shorten(json.dumps(total))
        raise InputError(
            f"metadata.total_size: expected a positive integer of bytes, at most {MAX_PARAMS:,} (got {shown})", where=where
        )
    excluded = tuple(name for name in weight_map if not_served(name, num_hidden_layers))
    params = None
    if dtype_bytes and not excluded and total % int(dtype_bytes) == 0:
        params = total // int(dtype_bytes)
    what = f"metadata.total_size of {index.name} ({total:,} bytes, {len(weight_map):,} tensors)"
    if params is not None:
        what += f" / {dtype_bytes:g} bytes per weight (every tensor taken to be in the config's dtype)"
    if excluded:
        what += (
            f"; includes {len(excluded)} multi-token-prediction tensors the index cannot size "
            "(give the folder with the .safetensors files to leave them out)"
        )
    return CheckpointWeights(
        weight_bytes=total, params=params, tensors=len(weight_map), excluded=excluded, excluded_bytes=None, source=what
    )


def check_count(weights: CheckpointWeights, params: int, reference: str, *, where: str) -> None:
    """Refuse a checkpoint that cannot hold the model whose count (`params`, from `reference`:
    the config's formula or --params-total) is known: its parameters outside
    [MIN_CHECKPOINT_SHARE, MAX_CHECKPOINT_SHARE] x `params`, or, where packed tensors or an
    index leave the parameters unknown, its bytes outside what that many weights take in the
    narrowest and the widest formats (MIN_WEIGHT_BYTES, MAX_WEIGHT_BYTES) within the same shares."""
    bounds = (
        f"a checkpoint holds at least {MIN_CHECKPOINT_SHARE:.0%} and at most {MAX_CHECKPOINT_SHARE:g} times the model "
        "its config describes (more: a vision tower, multi-token-prediction layers)"
    )
    hint = "are these the weights of this config? (give --params-total if the count is wrong)"
    if weights.params is not None:
        if MIN_CHECKPOINT_SHARE * params <= weights.params <= MAX_CHECKPOINT_SHARE * params:
            return
        raise InputError(
            f"the checkpoint holds {weights.params:,} parameters, {reference} counts {params:,}: {bounds}; {hint}",
            where=where,
        )
    low = MIN_CHECKPOINT_SHARE * MIN_WEIGHT_BYTES * params
    high = MAX_CHECKPOINT_SHARE * MAX_WEIGHT_BYTES * params
    if low <= weights.weight_bytes <= high:
        return
    raise InputError(
        f"the checkpoint holds {weights.weight_bytes:,} bytes, {weights.weight_bytes / params:.3g} per parameter of the "
        f"{params:,} that {reference} counts: {bounds}, at {MIN_WEIGHT_BYTES * 8:g} to {MAX_WEIGHT_BYTES * 8:g} bits "
        f"a weight; {hint}",
        where=where,
    )
