"""The reserved figure under variable-length micro-batches (estimate/varlen.py): the step's transients replayed per
length, in order, through one caching allocator model (the simulator comparison: tests/sim/test_sim_varlen.py)."""

from __future__ import annotations

import importlib

from vramfit.estimate import resolve_spec
from vramfit.scenario import parse_scenario

varlen = importlib.import_module("vramfit.estimate.varlen")

# SWIFT_BENCH_2401-3's scenario (found.jsonl): Yi-34B LoRA under transformers < 4.45 (logits.float() in the model)
SWIFT = {"model": "01-ai/Yi-34B", "method": "lora", "precision": "bf16-true", "lora_rank": 8, "lora_alpha": 32,
         "lora_dropout": 0.05, "lora_targets": ["q_proj", "k_proj", "v_proj"], "optimizer": "adamw",
         "micro_batch_size": 1, "seq_len": 2048, "grad_accum": 16, "gradient_checkpointing": "full",
         "attention": "flash", "framework": "hf", "gpu": "a100-80gb-sxm",
         "framework_version": "transformers-4.44+peft-0.11"}


def _stranded(lengths: list[int], **change) -> int:
    sc = parse_scenario({**SWIFT, **change})
    return varlen.stranded_bytes(resolve_spec(sc)[1], sc, lengths)


def test_only_record_lengths_open_segments():
    assert varlen.record_lengths([512, 300, 2048, 2048, 1024, 4096]) == [512, 2048, 4096]
    assert _stranded([2048, 1024, 512, 1536]) == 0  # the longest first: every later loss fits its cached blocks
    assert _stranded([512, 300, 1024, 700, 2048]) == _stranded([512, 1024, 2048])


def test_close_record_lengths_strand_the_most():
    # a record far below the next one leaves segments its successor's smaller tensors (the bf16 logits) reuse;
    # records close to the longest leave whole loss-sized segments no later request fits in
    assert _stranded([1024, 2048]) == 530_579_456  # 0.49 GiB
    assert _stranded([1536, 2048]) == 1_054_867_456  # 0.98 GiB
    assert _stranded([1900, 2000, 2048]) == 2_969_567_232  # 2.77 GiB
    assert _stranded([2047, 2048]) == 0  # within the 2 MiB segment rounding: the same blocks serve both


def test_fixed_lengths_keep_the_estimate():
    assert _stranded([2048] * 5) == 0
    assert _stranded([4096] * 3, seq_len=4096) == 0
