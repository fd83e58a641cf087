"""Estimator vs simulator on the reserved figure when micro-batch lengths vary (estimate/varlen.py).

Yi-34B LoRA (q, k, v), bf16, batch 1, full checkpointing, flash attention, as the ms-swift benchmark rows
(SWIFT_BENCH_2401, found.jsonl) ran it, at the default framework version (the simulator runs today's
transformers). The simulator runs the real library on fake tensors with the micro-batch lengths in the given order
(its batch maker patched per micro-batch) and replays every allocation through the caching allocator model:
lengths rising to 4,096 leave the earlier batches' loss segments reserved (+3.28 GiB), the same lengths falling
add nothing; the estimator's replay of its step transients per length (``stranded_bytes``) is 0.40 GiB above that:
it leaves out the saved activations and gradients, which settle into part of the stranded segments in the
simulator. Llama-3.1-8B with lengths 3,000 / 3,500 / 4,000 / 4,096: +14.71 GiB in both (2 MiB apart).
"""

from __future__ import annotations

import importlib
import itertools

import pytest

from vramfit.estimate import resolve_spec
from vramfit.scenario import parse_scenario
from vramfit.sim import images, simulate

varlen = importlib.import_module("vramfit.estimate.varlen")

SCENARIO = {"model": "01-ai/Yi-34B", "method": "lora", "precision": "bf16-true", "lora_rank": 8, "lora_alpha": 32,
            "lora_dropout": 0.05, "lora_targets": ["q_proj", "k_proj", "v_proj"], "optimizer": "adamw",
            "micro_batch_size": 1, "seq_len": 4096, "grad_accum": 4, "gradient_checkpointing": "full",
            "attention": "flash", "gpu": "a100-80gb-sxm"}
RISING = [1024, 2048, 3072, 4096]


def _sim_reserved(monkeypatch, lengths: list[int], scenario: dict = SCENARIO) -> int:
    order = itertools.cycle(lengths)  # one length per micro-batch, in order (grad_accum 4: each step the same)
    real = images.batch
    monkeypatch.setattr(images, "batch", lambda im, vocab, B, S, dtype, device: real(im, vocab, B, next(order),
                                                                                     dtype, device))
    try:
        return simulate(scenario).result.peak.reserved_bytes
    finally:
        monkeypatch.setattr(images, "batch", real)


@pytest.mark.slow
def test_rising_lengths_grow_reserved_in_the_simulator_and_the_estimator(monkeypatch):
    fixed = _sim_reserved(monkeypatch, [4096])
    rising = _sim_reserved(monkeypatch, RISING)
    falling = _sim_reserved(monkeypatch, RISING[::-1])
    sc = parse_scenario(SCENARIO)
    spec = resolve_spec(sc)[1]
    # 71.83 GiB at 4,096 tokens every step; rising lengths +3.28 GiB; falling 51.4 MiB less (no 4,096 batch twice).
    # Until 2026-12-06 the simulator's LoRA dropout kept a bf16 noise tensor where CUDA keeps a bool mask
    # (sim/cuda_emulation.py cuda_dropout): 77,210,295,296 B (71.91 GiB) fixed, rising +3,437,232,128 B (+3.20 GiB)
    assert (fixed, rising - fixed, falling - fixed) == (77_122_214_912, 3_525_312_512, -53_936_128)
    assert varlen.stranded_bytes(spec, sc, RISING) == 3_948_937_216  # 3.68 GiB: 0.40 GiB above the simulator
    assert varlen.stranded_bytes(spec, sc, RISING[::-1]) == 0


LLAMA = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "precision": "bf16-mixed", "lora_rank": 16,
         "optimizer": "adamw", "micro_batch_size": 1, "seq_len": 4096, "grad_accum": 4, "gradient_checkpointing": "full",
         "attention": "flash", "gpu": "a100-80gb-sxm"}
CLOSE = [3000, 3500, 4000, 4096]


@pytest.mark.slow
def test_records_close_below_the_longest_strand_their_whole_loss(monkeypatch):
    # Llama-3.1-8B (128,256-token vocabulary), bf16 autocast: each record strands its loss's fp32 (T, V) segments
    fixed = _sim_reserved(monkeypatch, [4096], LLAMA)
    close = _sim_reserved(monkeypatch, CLOSE, LLAMA)
    sc = parse_scenario(LLAMA)
    assert (fixed, close - fixed) == (44_349_631_488, 15_797_846_016)  # 41.30 GiB fixed, +14.71 GiB
    # the estimator's replay of the same lengths: one 2 MiB unit above the simulator
    assert varlen.stranded_bytes(resolve_spec(sc)[1], sc, CLOSE) == 15_799_943_168
