"""StepModel.decode_step_one_s is decode_step_s of one batch bit for bit, on every catalog model,
GPU and tensor-parallel degree that fits, dense and MoE, with and without a bulk all-reduce."""

import numpy as np
import pytest

from planner.catalog import load_catalog
from planner.deployment import make_deployment
from planner.roofline import StepModel

CATALOG = load_catalog()
BATCHES = [1e-9, 0.37, 1.0, 1.5, 7.0, 31.25, 100.0, 257.3, 1024.0, 4096.0]


def _steps():
    out = []
    for model in sorted(CATALOG.models):
        for gpu in sorted(CATALOG.gpus):
            for tp in (1, 2, 8):
                try:
                    dep = make_deployment(CATALOG, model=model, gpu=gpu, tp=tp, weight_dtype="fp8")
                except Exception:  # a GPU without this dtype or tp: not a deployment
                    continue
                out.append(StepModel.of(dep))
    return out


STEPS = _steps()


def test_the_catalog_gives_every_path():
    assert any(s.tp == 1 for s in STEPS) and any(s.tp > 1 for s in STEPS)
    assert any(s.allreduce_bulk_latency_s is None and s.tp > 1 for s in STEPS)
    assert any(s.allreduce_bulk_latency_s is not None and s.tp > 1 for s in STEPS)
    assert any(s.model.num_experts for s in STEPS) and any(not s.model.num_experts for s in STEPS)


@pytest.mark.parametrize("batch", BATCHES)
def test_one_batch_equals_the_array_formula_bit_for_bit(batch):
    rng = np.random.default_rng(int(batch * 1000) % 2**32)
    for step in STEPS:
        cache, ctx = batch * float(rng.uniform(1e4, 1e8)), batch * float(rng.uniform(1.0, 1e5))
        want = float(step.decode_step_s(batch, cache, ctx))
        assert step.decode_step_one_s(batch, cache, ctx) == want, (step.model.id, step.tp, batch)
