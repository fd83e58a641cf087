"""Estimator vs simulator on the reserved figure where cached segments set it: HF QLoRA at a long sequence.

Llama-3.1-8B (real widths and vocabulary, extrapolated from 3 and 4 layers), 4-bit QLoRA on every linear,
flash attention, full checkpointing, 16,384 tokens: the loss's fp32 (T, V) tensors open segments of their own,
and what stays cached below them is the checkpointed no-grad MLP's working set, fp32 under HF QLoRA with
bitsandbytes' fp32 output copy and PEFT's defensive clone per adapted linear (estimate/transients.py
``_nograd_mlp``). The estimator was 5.5 % under the simulator here before that was replayed op by op.
"""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.sim import simulate

SCENARIO = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "quantize": "nf4-dq", "lora_rank": 32,
            "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            "seq_len": 16384, "attention": "flash", "optimizer": "adamw-8bit", "gradient_checkpointing": "full"}


def test_hf_qlora_long_sequence_reserved_matches_the_simulator():
    sim = simulate(SCENARIO).result.peak
    est = estimate(SCENARIO).peak
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=0.01)
    assert est.reserved_bytes == pytest.approx(sim.reserved_bytes, rel=0.01)
