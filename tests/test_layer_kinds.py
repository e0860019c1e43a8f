"""The cache summed per layer kind (planner.memory.kv_bytes_per_token_by_layer_kind) and what the
footprint, the ladder and the weights make of it, on variants of the catalog's Llama 3.1 8B
(32 layers x 2 x 8 KV heads x 128 x 2 bytes = 4,096 bytes per token per layer in bf16)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from planner.catalog import Model
from planner.deployment import make_deployment
from planner.footprint import footprint
from planner.histogram import Histogram
from planner.memory import (
    budget_ladder,
    kv_bytes_for_tokens,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_by_layer_kind,
    kv_token_cap,
    memory_levers,
    weight_bytes,
)
from planner.paged import token_profile

PER_LAYER = 2 * 8 * 128 * 2


def variant(catalog, **fields) -> Model:
    base = catalog.model("llama-3.1-8b").model_dump()
    return Model.model_validate({**base, "id": "toy", **fields})


def test_every_kind_is_summed_per_layer(catalog):
    bf16 = catalog.dtype("bf16")
    m = variant(catalog, num_chunked_attention_layers=12, attention_chunk_size=1024, num_kv_shared_layers=4,
                num_state_layers=6, state_layer_kind="mamba", state_bytes_per_layer=1_000_000,
                num_cacheless_layers=2)
    layout = kv_bytes_per_token_by_layer_kind(m, bf16)
    assert [(k.kind, k.layers, k.bytes_per_token, k.token_cap, k.state_bytes) for k in layout.kinds] == [
        ("full_attention", 8, 8 * PER_LAYER, None, 0),
        ("chunked_attention", 12, 12 * PER_LAYER, 1024, 0),
        ("kv_shared", 4, 0, None, 0),
        ("mamba", 6, 0, None, 6_000_000),
        ("no_cache", 2, 0, None, 0),
    ]
    assert kv_bytes_per_token(m, bf16) == 20 * PER_LAYER
    assert kv_token_cap(m) == 1024
    # Below the chunk every caching layer grows; above it the chunked ones stop at 1,024 tokens.
    assert kv_bytes_for_tokens(m, 1000, bf16) == 20 * PER_LAYER * 1000
    assert kv_bytes_for_tokens(m, 5000, bf16) == 8 * PER_LAYER * 5000 + 12 * PER_LAYER * 1024
    assert kv_bytes_per_sequence(m, 5000, bf16) == kv_bytes_for_tokens(m, 5000, bf16) + 6_000_000


def test_a_plain_model_is_one_full_attention_kind(catalog):
    layout = kv_bytes_per_token_by_layer_kind(catalog.model("llama-3.1-8b"), catalog.dtype("bf16"))
    assert [(k.kind, k.layers, k.bytes_per_token) for k in layout.kinds] == [("full_attention", 32, 131_072)]
    assert layout.state_bytes_per_sequence == 0
    assert layout.token_cap is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_sliding_window_layers": 10, "sliding_window": 4096, "num_chunked_attention_layers": 10,
          "attention_chunk_size": 8192}, "sliding-window and chunked layers in one model are not modelled"),
        ({"num_state_layers": 30, "state_layer_kind": "mamba", "state_bytes_per_layer": 1, "num_kv_shared_layers": 3},
         "= 33 exceeds num_hidden_layers 32"),
        ({"num_state_layers": 3}, "num_state_layers, state_layer_kind and state_bytes_per_layer go together"),
        ({"num_chunked_attention_layers": 3}, "num_chunked_attention_layers given without attention_chunk_size"),
        ({"checkpoint_weight_bytes": 10}, "checkpoint_weight_bytes needs checkpoint_dtype"),
    ],
)
def test_inconsistent_layouts_are_refused(catalog, fields, message):
    with pytest.raises(ValidationError, match=message):
        variant(catalog, **fields)


def test_footprint_adds_the_fixed_state_to_every_resident_sequence(catalog):
    plain = variant(catalog)
    hybrid = variant(catalog, num_state_layers=16, state_layer_kind="linear_attention", state_bytes_per_layer=2**20)
    hist = Histogram.constant(2000, 200)
    prints = {}
    for m in (plain, hybrid):
        dep = make_deployment(catalog, model=m, gpu="h100-sxm", max_model_len=8192)
        prof = token_profile(hist, block_size=dep.block_size, sliding_window=kv_token_cap(m))
        prints[m is hybrid] = footprint(dep, prof, budget_ladder(dep))
    state = 16 * 2**20
    # Half the layers no longer cache tokens; every sequence holds the state instead.
    assert prints[True].mean_bytes == pytest.approx(prints[False].mean_bytes / 2 + state, rel=1e-12)
    assert prints[True].worst_case_bytes == 16 * PER_LAYER * 8192 + state
    ladder = budget_ladder(make_deployment(catalog, model=hybrid, gpu="h100-sxm", max_model_len=8192))
    assert ladder.kv_bytes_per_user == 16 * PER_LAYER * 8192 + state
    assert ladder.worst_case_users == math.floor(ladder.kv_budget_bytes / ladder.kv_bytes_per_user)


def test_percentile_sizing_keeps_whole_blocks_of_a_window(catalog):
    """A window of 100 tokens keeps 7 blocks of 16, as one of 112 does: in the mean footprint
    (planner.paged), in the levels percentile sizing draws its quantile from, and so in the count of
    resident sequences it sizes for (the levels capped at the raw 100 tokens held less than the mean)."""
    from planner.footprint import _level_bytes, memory_concurrency

    hist = Histogram.from_arrays([60, 300, 2500, 5000], [40, 200, 400, 10])
    sized = []
    for window in (100, 112):
        m = variant(catalog, sliding_window=window, num_sliding_window_layers=16)
        dep = make_deployment(catalog, model=m, gpu="h100-sxm", max_model_len=8192)
        prof = token_profile(hist, block_size=dep.block_size, sliding_window=kv_token_cap(m))
        fp = footprint(dep, prof, budget_ladder(dep))
        sized.append((fp.mean_bytes, _level_bytes(dep, prof).tolist(),
                      memory_concurrency(dep, prof, fp, 0.99)["percentile"]))
    assert sized[0] == sized[1]
    assert sized[0][1][7] == 7 * 16 * 32 * PER_LAYER and sized[0][1][8] == (8 * 16 * 16 + 7 * 16 * 16) * PER_LAYER


def test_checkpoint_bytes_are_used_in_the_checkpoints_own_dtype_only(catalog):
    m = variant(catalog, checkpoint_dtype="mxfp4", checkpoint_weight_bytes=5_000_000_000)
    assert weight_bytes(m, catalog.dtype("mxfp4")) == 5_000_000_000
    assert weight_bytes(m, catalog.dtype("bf16")) == 2 * m.params_total
    assert weight_bytes(m, catalog.dtype("fp8")) == m.params_total
    # fp8 weights would be larger than the 5 GB checkpoint: not a lever.
    dep = make_deployment(catalog, model=m, gpu="h100-sxm", weight_dtype="mxfp4", max_model_len=8192)
    levers = {lv.lever: lv for lv in memory_levers(dep, catalog.dtype("fp8"), 4096)}
    assert levers["fp8 weights"].available is False
    assert levers["fp8 weights"].why_not == "fp8 weights are larger than the mxfp4 weights already in use"
    assert levers["fp8 KV cache"].available is True
