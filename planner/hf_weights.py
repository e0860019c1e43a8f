"""The weights of an imported model: the checkpoint's dtype (from `quantization_config`), the
parameter counts (given on the command line, read from the checkpoint, or the family's formula;
`params_source` says which, and what the other would have said), the checkpoint's bytes where
they are known exactly, and notes for what a count leaves out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.checkpoint import CheckpointWeights
from planner.errors import InputError
from planner.hf_config import FamilyReader
from planner.hf_families import BY_MODEL_TYPE
from planner.params.blocks import ParamCount
from planner.params.moe import gpt_oss_routed_expert_weights

MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def quantized_dtype(r: FamilyReader) -> str | None:
    """The catalog dtype of pre-quantized weights (quantization_config), None for unquantized ones."""
    qc = r.cfg.get("quantization_config")
    if qc is None:
        return None
    key = r.cfg.name("quantization_config")
    if not isinstance(qc, dict):
        raise InputError(f"{key}: expected an object (got {qc!r})", where=r.cfg.where)
    method = qc.get("quant_method")
    producer = qc.get("producer")
    if method is None and isinstance(producer, dict) and producer.get("name") == "modelopt":
        method = "modelopt"  # ModelOpt's own quantization config names its producer, not a method
    if method is None:
        raise InputError(f"{key}.quant_method: required field is missing (the weights' format: fp8, mxfp4, awq, "
                         "gptq, compressed-tensors or modelopt)", where=r.cfg.where)
    if method == "fp8":
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("awq", "gptq"):
        if qc.get("bits") == 4 and qc.get("group_size") == 128:
            return "int4"
        raise InputError(
            f"{key}: {method} with bits {qc.get('bits')} / group_size {qc.get('group_size')} is not a catalog dtype "
            "(int4 is 4-bit in groups of 128, each with a 16-bit scale and a 4-bit zero point); give --weights FOLDER to "
            "read its bytes",
            where=r.cfg.where,
        )
    if method == "compressed-tensors":
        return _compressed_tensors_dtype(qc, key, r.cfg.where)
    if method == "modelopt":
        # hf_quant_config.json's shape nests it (quantization.quant_algo); a config.json's is flat
        nested = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else {}
        name = "quant_algo" if "quant_algo" in qc else "quantization.quant_algo"
        given = qc.get("quant_algo", nested.get("quant_algo"))
        if given is None:
            raise InputError(f"{key}.quant_algo: required field is missing (ModelOpt's algorithm: FP8 or NVFP4)",
                             where=r.cfg.where)
        algo = str(given).upper()
        if algo in ("FP8", "NVFP4"):
            return "fp8" if algo == "FP8" else "fp4"
        raise InputError(f"{key}.{name}: '{given}' is not a catalog dtype (known: FP8, NVFP4)", where=r.cfg.where)
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


def resolve_params(
    r: FamilyReader,
    counted: ParamCount | None,
    read: CheckpointWeights | None,
    params_total: int | None,
    params_active: int | None,
    is_moe: bool,
    towers: Sequence[str] = (),
) -> tuple[int, int, str]:
    """(total, active, params_source): given counts win, then the checkpoint's, then the formula's.
    towers: the config's vision or audio towers (towers_of). A checkpoint holds
    their weights, which are loaded (total), but a text token runs through the language model
    alone: where the formula counts it, that count is the active one."""
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
        if towers and counted is not None and not params_active and counted.active < total:
            return total, counted.active, (f"exact: {read.source} (active: the language model by {formula}, "
                                           f"{counted.active:,}; the {' and '.join(towers)} tower computes no text token)")
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


def store_checkpoint(
    entry: dict[str, Any], r: FamilyReader, dtype: str | None, read: CheckpointWeights | None, counted: ParamCount | None
) -> None:
    """checkpoint_dtype and, where they are known exactly, the checkpoint's bytes."""
    if dtype:
        entry["checkpoint_dtype"] = dtype
        r.note(f"weights published in {dtype} ({r.cfg.name('quantization_config')}): the default weight dtype")
    if read is not None:
        published = {r.cfg.text("torch_dtype"), r.cfg.text("dtype")}
        if not dtype:
            # vLLM's --dtype auto serves float32 and float16 checkpoints in fp16, bfloat16 ones in bf16
            # (vLLM engine arguments, --dtype)
            dtype = "fp16" if published & {"float16", "float32"} else "bf16"
            entry["checkpoint_dtype"] = dtype
        if "float32" in published and dtype == "fp16":
            # The files hold 4 bytes a weight; the engine loads 2. Their bytes are not what it serves.
            if read.params is not None:
                entry["checkpoint_weight_bytes"] = 2 * read.params
                r.note(f"checkpoint weights published in float32 ({read.weight_bytes:,} bytes: {read.source}), "
                       f"served in fp16 (vLLM --dtype auto): {2 * read.params:,} bytes")
            else:
                r.note(f"checkpoint weights published in float32 ({read.weight_bytes:,} bytes: {read.source}), served "
                       "in fp16: their parameters are not known from these files, so the parameter count (the "
                       "formula's, or --params-total) sets the weights")
            return
        entry["checkpoint_weight_bytes"] = read.weight_bytes
        r.note(f"checkpoint weights {read.weight_bytes:,} bytes: {read.source}")
    elif dtype == "mxfp4" and r.family.name == "gpt_oss" and counted is not None:
        expert = gpt_oss_routed_expert_weights(
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


def towers_of(outer: Mapping[str, Any]) -> list[str]:
    """The vision and audio towers a multimodal config declares beside its text model (its
    vision_config, audio_config): "vision", "audio"."""
    return [k.removesuffix("_config") for k in ("vision_config", "audio_config") if outer.get(k)]


def note_uncounted(
    r: FamilyReader, outer: Mapping[str, Any], counted: ParamCount | None, read: CheckpointWeights | None, given: int | None
) -> None:
    """Lines for what the count leaves out: a vision/audio tower, a multi-token-prediction module."""
    from_formula = counted is not None and not given and (read is None or read.params is None)
    towers = towers_of(outer)
    if towers and from_formula:
        r.note(f"the {' and '.join(towers)} tower is not counted (text model only): "
               "give --weights or --params-total to count it")
    for key in MTP_KEYS:
        if from_formula and r.cfg.get(key):
            r.note(f"{r.cfg.name(key)} = {r.cfg.get(key)}: the multi-token-prediction module is not counted "
                   "(loaded only for speculative decoding)")
