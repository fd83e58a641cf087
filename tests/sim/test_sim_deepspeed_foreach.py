"""DeepSpeed ZeRO's step with the HF Trainer's foreach AdamW (transformers < 4.48's default ``adamw_torch``, the
``transformers-4.47`` release of the hf profile), estimator against DeepSpeed's own engine on fake tensors.

The engine points the optimizer at one flat fp32 tensor (ZeRO-1/2: the partition; ZeRO-3: the sub-group) whose fp32
gradient is alive through the step, and foreach AdamW copies its whole second moment (``torch._foreach_sqrt``).
ZeRO-1/2 have freed the 16-bit partition first, so the allocated step is the flatten's (2 + 2 + 4 bytes per element)
and the foreach copy only opens a segment of its own; ZeRO-3 keeps its 16-bit gradient buffer, so 4 + 4 bytes per
element more than it holds.
"""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny

from vramfit.estimate import estimate
from vramfit.sim import simulate

LAYERS = 4


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("dsf") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=256, vocab=4096)))
    return str(path)


def _scenario(path: str, stage: str, version: str | None) -> dict:
    sc = {"model": path, "method": "full", "precision": "bf16-mixed", "seq_len": 512, "micro_batch_size": 2,
          "attention": "flash", "num_gpus": 2, "parallelism": stage, "framework": "hf"}
    return {**sc, "framework_version": version} if version else sc


def _step(result) -> object:
    return next(p for p in result.phases if p.phase == "optimizer-step")


@pytest.mark.parametrize(("stage", "per_element"), [("zero2", 2 + 4), ("zero3", 4 + 4)])
def test_foreach_step_matches_the_engine(model_path, stage, per_element):
    sc = _scenario(model_path, stage, "transformers-4.47")
    sim = _step(simulate(sc, layers=LAYERS).result)
    r = estimate(sc)
    est = _step(r)
    partition = r.model.num_params // 2
    assert dict(est.breakdown)["temporaries"] == pytest.approx(per_element * partition, abs=4096)
    slack = dict(sim.breakdown).get("allocator_slack", 0)
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes - slack, rel=0.005)
