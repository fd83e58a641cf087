"""PEFT's own DoRA layer on fake tensors against the estimator's DoRA (estimate/dora.py): what DoRA adds to the
allocated peak, with dropout 0 (the base output reused), with dropout (recomputed, its fp32 weight kept) and on a 4-bit
base (DoRA de-quantizes it, sim/qlora.py patch_dora_dequantize). Llama-3.2-1B, 2 x 512 tokens, every linear adapted.
When written: simulator +2,216.7 / +6,640.7 / +2,150 / +2,725 MiB, estimator +2,212.3 / +6,660.3 / +2,148.3 /
+2,724.4 MiB."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.sim import simulate

BASE = {"model": "meta-llama/Llama-3.2-1B", "micro_batch_size": 2, "seq_len": 512, "lora_rank": 16,
        "lora_targets": ["all-linear"], "lora_dropout": 0.0}


def _added(sc: dict) -> tuple[int, int]:
    """(simulated, estimated) allocated peak with DoRA less without."""
    sim = [simulate({**sc, "dora": d}, layers=(3, 4)).result.peak.allocated_bytes for d in (False, True)]
    est = [estimate({**sc, "dora": d}).peak.allocated_bytes for d in (False, True)]
    return sim[1] - sim[0], est[1] - est[0]


@pytest.mark.slow
@pytest.mark.parametrize("keys", [{"precision": "bf16-true"}, {"precision": "bf16-true", "lora_dropout": 0.05},
                                  {"method": "qlora"},
                                  # 8 x 2,048 tokens, checkpointed: the block's backward holds result_dora's fp32 gradient
                                  {"precision": "bf16-true", "gradient_checkpointing": "full", "loss": "fused",
                                   "micro_batch_size": 8, "seq_len": 2048}])
def test_dora_adds_what_the_simulator_adds(keys):
    sim, est = _added({**BASE, **keys})
    assert sim > 2**31  # at least 2 GiB: the base and LoRA outputs of 112 linears (more with dropout)
    assert abs(est / sim - 1) < 0.02, (keys, sim, est)
