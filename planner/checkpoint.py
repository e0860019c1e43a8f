"""Weights of a published checkpoint, counted from its safetensors files (no network, no tensor data read).

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming
every tensor's dtype, shape and byte range (github.com/huggingface/safetensors, README "Format").
That header is all this module needs, so it reads it directly: the `safetensors` package would
add a compiled dependency to parse eight bytes and a JSON object, and it reads the same header.

Two inputs, two levels of exactness:
- the `.safetensors` files (a model folder): every tensor's dtype and shape, so the bytes and
  the element counts are exact, and tensors the engine does not serve (a multi-token-prediction
  layer) can be left out by name;
- `model.safetensors.index.json` alone: `metadata.total_size` is the bytes of every tensor
  (bytes, not parameters: a bf16 weight is 2 of them, an fp8 weight 1), and the weight map
  names the tensors but not their sizes. Parameters follow only when every tensor has the
  config's dtype; tensors to leave out can be named but not subtracted.
Packed tensors (integer dtypes holding several 4-bit values, as MXFP4 blocks or GPTQ qweight)
make elements differ from parameters: their bytes count, their elements do not.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError

INDEX_NAME = "model.safetensors.index.json"

# Bytes per element of the safetensors dtypes whose elements are parameters.
FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
# Integer and sub-byte dtypes: quantized blocks, packed weights, scales; bytes count, elements are not parameters.
PACKED_BYTES = {"I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E8M0": 1}
_SCALE_SUFFIXES = ("_scale", "_scale_inv", "_scales", "scales", "_zeros", "zero_point", "_amax")
_DECODER_LAYER = re.compile(r"(?:^|\.)model\.(?:language_model\.)?layers\.(\d+)\.")


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
    """The weights at `path`: a model folder (its .safetensors files, else its index), an index
    file, or one .safetensors file. `dtype_bytes` is the config's dtype (2 for bf16), used to turn
    an index's total_size into parameters when no tensor header is at hand (None: pre-quantized)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if files:
            return _from_headers(files, num_hidden_layers, where=str(path))
        index = path / INDEX_NAME
        if index.is_file():
            return _from_index(index, num_hidden_layers, dtype_bytes)
        raise InputError(f"no .safetensors file and no {INDEX_NAME} in the folder", where=str(path))
    if path.name.endswith(".safetensors"):
        return _from_headers([path], num_hidden_layers, where=str(path))
    if path.is_file():
        return _from_index(path, num_hidden_layers, dtype_bytes)
    raise InputError("file not found", where=str(path))


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (its first 8 + n bytes)."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError("not a safetensors file (shorter than its 8-byte header length)", where=str(path))
            (n,) = struct.unpack("<Q", head)
            if n > 100 * 2**20:
                raise InputError(f"not a safetensors file (header length {n} bytes)", where=str(path))
            raw = f.read(n)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError("not a safetensors file (its header is not JSON)", where=str(path)) from None
    if not isinstance(header, dict):
        raise InputError("not a safetensors file (its header is not a JSON object)", where=str(path))
    return header


def _from_headers(files: list[Path], num_hidden_layers: int, where: str) -> CheckpointWeights:
    weight_bytes = params = tensors = excluded_bytes = 0
    exact_params = True
    excluded: list[str] = []
    for file in files:
        for name, info in safetensors_header(file).items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise InputError(f"tensor '{name}': header entry lacks dtype, shape or data_offsets", where=str(file)) from None
            size = int(end) - int(begin)
            if not_served(name, num_hidden_layers):
                excluded.append(name)
                excluded_bytes += size
                continue
            tensors += 1
            weight_bytes += size
            elements = 1
            for d in shape:
                elements *= int(d)
            if dtype in FLOAT_BYTES:
                if size != elements * FLOAT_BYTES[dtype]:
                    raise InputError(f"tensor '{name}': {size} bytes for {elements} {dtype} elements", where=str(file))
                if not name.endswith(_SCALE_SUFFIXES):
                    params += elements
            elif dtype in PACKED_BYTES:
                exact_params = False
            else:
                raise InputError(f"tensor '{name}': unknown safetensors dtype '{dtype}'", where=str(file))
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
    try:
        raw = json.loads(index.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("file not found", where=where) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a safetensors index: {exc}", where=where) from None
    metadata = raw.get("metadata") if isinstance(raw, dict) else None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(metadata, dict) or not isinstance(weight_map, dict):
        raise InputError("not a safetensors index (needs 'metadata' and 'weight_map')", where=where)
    total = metadata.get("total_size")
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise InputError(f"metadata.total_size: expected a positive integer of bytes (got {total!r})", where=where)
    excluded = tuple(name for name in weight_map if not_served(name, num_hidden_layers))
    params = None
    if dtype_bytes and not excluded and total % dtype_bytes == 0:
        params = int(total // dtype_bytes)
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
