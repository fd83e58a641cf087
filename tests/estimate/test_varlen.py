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


def test_a_shuffled_data_set_gives_a_spread():
    sc = parse_scenario(SWIFT)
    spec = resolve_spec(sc)[1]
    lengths = list(range(64, 2049, 64))  # 32 samples, evenly spread up to the bound
    low, mid, high = varlen.shuffled_stranded(spec, sc, lengths, runs=50)
    assert (low, mid, high) == (1_451_229_184, 2_843_738_112, 6_601_834_496)  # 1.35 / 2.65 / 6.15 GiB
    assert varlen.shuffled_stranded(spec, sc, [2048] * 32, runs=5) == (0, 0, 0)  # packed / fixed: nothing
    # truncated to seq_len; two batches: half the orders put the shorter first (0.49 GiB, as test 2), half do not
    assert varlen.shuffled_stranded(spec, sc, [1024, 4000]) == (0, 0, 530_579_456)
    wide = parse_scenario({**SWIFT, "micro_batch_size": 4})  # padded to each batch's longest: 4x the loss rows
    assert varlen.shuffled_stranded(spec, wide, lengths, runs=50) == (4_204_789_760, 9_783_214_080, 16_986_931_200)
