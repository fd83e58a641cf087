"""DeepSpeed < 0.17.2 made ZeRO-1/2's IPG buckets when the optimizer's backward() started (v0.16.2
runtime/zero/stage_1_and_2.py backward l. 2039-2052, before ``loss_scaler.backward``); 0.19.8 makes them at the first
gradient hook (``process_gradients`` -> ``setup_buckets``, the same allocation code). The simulator's 0.19.8 engine is
run once as it is and once with ``setup_buckets()`` called before ``engine.backward`` (the old order; the hook's call
is then a no-op, ``ready_for_gradients``), against the estimator's deepspeed-0.18 and deepspeed-0.16 releases."""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny

from vramfit.estimate import estimate
from vramfit.sim import simulate

BUCKETS = 2 * 25_000_000 * 2  # buf_0 and buf_1 (overlap_comm) of reduce_bucket_size 2.5e7 bf16 elements


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("dsipg") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=2, hidden=512, vocab=32000)))
    zero = {"stage": 2, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 2.5e7,
            "allgather_bucket_size": 5e6}
    return {"model": str(path), "method": "lora", "precision": "bf16-true", "seq_len": 1024, "micro_batch_size": 2,
            "attention": "flash", "num_gpus": 2, "parallelism": "zero2", "framework": "hf", "lora_rank": 8,
            "framework_version": "transformers-4.47", "deepspeed_config": {"zero_optimization": zero}}


def _phases(result) -> dict[str, int]:
    return {p.phase: p.allocated_bytes for p in result.phases}


def test_buckets_made_at_backward_start_are_live_at_the_loss_backward(scenario, monkeypatch):
    from deepspeed.runtime.engine import DeepSpeedEngine

    hook = _phases(simulate(scenario, layers=2).result)
    backward = DeepSpeedEngine.backward

    def early(self, loss, *args, **kwargs):
        self.optimizer.setup_buckets()
        return backward(self, loss, *args, **kwargs)

    monkeypatch.setattr(DeepSpeedEngine, "backward", early)
    start = _phases(simulate(scenario, layers=2).result)
    # each bucket's block rounded up to 512 bytes by the caching allocator: 50_000_384
    assert {k: start[k] - hook[k] for k in hook} == {"forward": 0, "backward": BUCKETS + 768, "optimizer-step": 0}
    assert start["backward"] == 1_022_004_736  # the loss's backward is the engine's backward high point
    old, new = (_phases(estimate({**scenario, "framework_version": f"transformers-4.47+deepspeed-{v}"}))
                for v in ("0.16", "0.18"))
    assert {k: old[k] - new[k] for k in new} == {"forward": 0, "backward-loss": BUCKETS, "backward-block": 0,
                                                 "optimizer-step": 0}
