"""fsdp-no-shard against the simulator. The simulator runs FSDP2 (sim/fsdp.py), which has no NO_SHARD strategy, so
the reference is what FSDP1 itself runs at world size 1: any strategy becomes NO_SHARD there (torch v2.13.0
distributed/fsdp/_init_utils.py ``_init_core_state``), and NO_SHARD's per-rank memory on more ranks is the
same, since it shards nothing and all-reduces the gradients in place (estimate/no_shard.py)."""

from __future__ import annotations

import pytest
from simconfigs import titan_llama

from vramfit.estimate import estimate
from vramfit.sim import simulate

LAYERS = 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    return titan_llama(tmp_path_factory.mktemp("noshard"), LAYERS, hidden=1024, vocab=2048)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_per_rank_peak_is_one_gpus_trace(llama, method):
    base = {"model": llama, "framework": "hf", "method": method, "precision": "bf16-true", "seq_len": 256,
            "micro_batch_size": 2, "gradient_checkpointing": "full", "attention": "sdpa"}
    sim = simulate({**base, "num_gpus": 1, "parallelism": "none"}, layers=LAYERS).result
    est = estimate({**base, "num_gpus": 2, "parallelism": "fsdp-no-shard"})
    assert est.peak.allocated_bytes == pytest.approx(sim.peak.allocated_bytes, rel=0.03)
    # DDP's bucket copy of the gradients is what NO_SHARD does not have
    ddp = estimate({**base, "num_gpus": 2, "parallelism": "ddp"})
    assert ddp.peak.allocated_bytes > est.peak.allocated_bytes
