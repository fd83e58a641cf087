"""Autocast caches the 16-bit cast of every fp32 leaf that requires grad for the whole autocast region (torch v2.13.0
aten/src/ATen/autocast_mode.cpp ``cached_cast``), and PEFT's LoRA A and B are such leaves handed to F.linear: the
forward holds every adapter's copy until it returns (estimate/forward_extras.py ``autocast_adapter_copies``). Before,
the estimate counted the output layer's copy alone: -4.2 % at the forward's peak of the first trace below, -2.9 % at
the second's (no checkpointing: the copies are saved into backward)."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.forward_extras import autocast_adapter_copies
from vramfit.estimate.framework import profile_for
from vramfit.estimate.params import Adapter
from vramfit.scenario import Framework, parse_scenario
from vramfit.sim import simulate

MiB = 2**20
LORA = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "lora_rank": 256, "lora_targets": "all-linear",
        "seq_len": 512, "micro_batch_size": 1, "precision": "bf16-mixed", "gradient_checkpointing": "full"}
HEAD = 128_256 * 2_048 * 2  # the output layer's bf16 copy
ADAPTERS = 688 * MiB  # 180,355,072 fp32 adapter elements


def _forward(result) -> dict:
    return dict(next(p for p in result.phases if p.phase == "forward").breakdown)


def test_the_forward_holds_every_adapters_cached_copy():
    traced = simulate(LORA).result
    est = estimate(LORA)
    assert _forward(traced)["autocast_copies"] == pytest.approx(HEAD + ADAPTERS // 2, abs=MiB)
    assert _forward(est)["autocast_copies"] == HEAD + ADAPTERS // 2
    assert next(p.allocated_bytes for p in est.phases if p.phase == "forward") == pytest.approx(
        next(p.allocated_bytes for p in traced.phases if p.phase == "forward"), rel=0.005)


def test_without_checkpointing_the_copies_are_saved_into_backward():
    sc = {**LORA, "gradient_checkpointing": "none"}
    traced = simulate(sc).result
    assert estimate(sc).peak.allocated_bytes == pytest.approx(traced.peak.allocated_bytes, rel=0.005)


def test_which_adapters_autocast_caches():
    sc = parse_scenario({**LORA, "lora_rank": 8})
    hf, lit = profile_for(Framework.HF), profile_for(Framework.LITGPT)
    q = Adapter("q_proj", 2048, 2048, 1)
    # A (8 x 2048) and B (2048 x 8) in each of 16 layers, bf16 copies of fp32 weights
    assert autocast_adapter_copies([q], sc, hf, 16) == 2 * 16 * (8 * 2048 + 2048 * 8)
    assert autocast_adapter_copies([q], sc, lit, 16) == 0  # lit-gpt multiplies by transposed views: no cache
    # an embedding's LoRA goes through F.embedding and a transposed B: nothing cached
    assert autocast_adapter_copies([Adapter("embed_tokens", 128_256, 2048, 0)], sc, hf, 16) == 0
    true = parse_scenario({**LORA, "lora_rank": 8, "precision": "fp32"})
    assert autocast_adapter_copies([q], true, hf, 16) == 0  # fp32 compute: nothing narrower to cast to
