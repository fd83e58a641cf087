"""What a training loop carries into the next micro-batch's forward (profile.loop_carry, estimate/retained_graph.py).

litgpt 2024's `logits = model(...)` keeps the previous micro-batch's fp32 logits (4 x T x V bytes) until the next call
returns. The CPU replica of litgpt@5895df10 lora.py's loop (retained_graph.py docstring) peaks in the second forward
exactly 4 TV above the first, at the call's end (bf16 logits + their fp32 conversion + the carried ones, 10 TV) or,
with the 4-bit head de-quantized (its fp16 output and the bf16 cast, bitsandbytes 0.42.0 MatMul4Bit), at the last
head chunk: 125.0 MiB de-quantized + 23.4 MiB of earlier chunks + the carried 62.5 MiB (V 32,000, h 1,024, T 512),
not at the loss (8 TV) beside the de-quantized weight, which never coexist."""

import pytest

from vramfit.estimate.framework import LoopCarry, profile_for
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario


def _step(model, **keys):
    base = {"model": model, "method": "qlora", "quantize": "nf4", "framework": "litgpt",
            "framework_version": "litgpt-2024", "precision": "bf16-true", "lora_targets": ["all-linear", "lm_head"],
            "lora_rank": 16, "micro_batch_size": 2, "seq_len": 512, "grad_accum": 3, "optimizer": "paged-adamw"}
    sc = parse_scenario({k: v for k, v in {**base, **keys}.items() if v is not None})
    return compute(resolve_model(model).spec, sc)


def _phase(step, name):
    return dict(next(p for p in step.phases if p.phase.value == name).parts)


def test_each_loop_names_what_it_carries():
    assert profile_for(Framework.HF).loop_carry is LoopCarry.NOTHING  # training_step returns loss.detach()
    assert profile_for(Framework.TORCHTUNE).loop_carry is LoopCarry.NOTHING  # v0.4.0 _loss_step: `del logits`
    assert profile_for(Framework.TORCHTUNE, "torchtune-0.1").loop_carry is LoopCarry.LOGITS  # its shifted copy
    assert profile_for(Framework.HF, "llama-recipes-2023").loop_carry is LoopCarry.OUTPUTS
    assert profile_for(Framework.LITGPT).loop_carry is LoopCarry.LOGITS
    assert profile_for(Framework.LITGPT, "litgpt-2024").loop_carry is LoopCarry.LOGITS
    assert [c.keeps_graph for c in LoopCarry] == [False, True, True]


def test_gemma_qlora_forward_peaks_at_the_4bit_head_with_the_carried_logits():
    """LIT_HUB_2409-4's scenario (gemma-2b QLoRA, 2 x 512): the head's fp16 + bf16 de-quantized copies (2 x 2 x 256,000
    x 2,048 + fp32 absmax), the three chunks before the last (2 x 128 x 256,000 bf16 each), the carried 4 TV."""
    step = _step("google/gemma-2b")
    fwd, TV = _phase(step, "forward"), 1024 * 256_000
    # the carried 4 TV (1,048,576,000) and the chunks before the last
    assert fwd["logits_loss"] == 4 * TV + 3 * 2 * 2 * 128 * 256_000 == 1_441_792_000
    assert fwd["temporaries"] == step.dequant == 2 * 2 * 256_000 * 2048 + 4 * 256_000 * 2048 // 64
    # the loss moment: the carried logits freed, no de-quantized weight; the last head chunk's shifted slice copied by
    # chunked_cross_entropy's reshape at micro-batch 2 (estimate/loss.py _litgpt_shift_copy)
    assert step.loss.forward_peak == 8 * TV + 4 * 2 * 127 * 256_000 == 2_357_248_000
    assert max(step.phases, key=lambda p: p.total).phase.value == "forward"


def test_lora_forward_carries_them_at_the_calls_end_below_the_loss_backward():
    """Llama-2-7B LoRA (LIT_HUB_2409-5's shape): forward's high point is the call's end, 2 + 4 TV of new logits beside
    the carried 4 TV, 2 TV above the loss moment; the loss backward (8 TV + its chunk gradients) stays the peak."""
    step = _step("meta-llama/Llama-2-7b-hf", method="lora", quantize="none", optimizer="adamw",
                 lora_targets=["q_proj", "v_proj"], lora_rank=32)
    fwd, TV = _phase(step, "forward"), 1024 * 32_000
    assert fwd["logits_loss"] == 6 * TV + 4 * TV
    assert "temporaries" not in fwd
    assert max(step.phases, key=lambda p: p.total).phase.value == "backward-loss"


@pytest.mark.parametrize("keys", [
    {"framework_version": None},  # lit-gpt@8641822: the longest sample first, with nothing before it
    {"framework": "hf", "framework_version": None, "lora_targets": ["all-linear"]},  # the Trainer carries nothing
])
def test_nothing_carried_elsewhere(keys):
    step = _step("google/gemma-2b", **keys)
    assert _phase(step, "forward")["logits_loss"] == step.loss.forward_peak


def test_torchtune_01_carries_its_shifted_copy_into_a_blocks_forward_not_into_its_loss():
    """torchtune 0.1 QLoRA (Llama-2-7B, 2 x 512, nf4-dq): the loss moment (the kept copy, log_softmax's contiguous
    input and output: 12 TV) is after the call, with the carried copy freed; a block's de-quantized weight sits beside
    the carried 4 TV, not beside the loss."""
    step = _step("meta-llama/Llama-2-7b-hf", framework="torchtune", framework_version="torchtune-0.1",
                 quantize="nf4-dq", optimizer="adamw", lora_targets=["q_proj", "v_proj"], grad_accum=16)
    fwd, TV = _phase(step, "forward"), 1024 * 32_000
    assert step.loss.kept == 4 * TV and step.loss.forward_peak == 12 * TV
    assert step.dequant == 92_995_584  # the 4096 x 11008 MLP weight in bf16 with its absmax
    assert fwd["logits_loss"] == 12 * TV and "temporaries" not in fwd  # 12 TV > 4 TV + that weight


def test_litgpts_logits_stay_bound_through_backward_and_the_optimizer_step():
    """full.py's `logits = model(input_ids)` is bound until the next call returns: the whole fp32 logits (4 TV) beside
    every block's backward and beside the optimizer step (TinyLlama full fine-tuning, 4 x 512, LIT_HUB_2409-15's shape)."""
    step = _step("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", method="full", quantize="none",
                 optimizer="adamw", lora_targets=None, lora_rank=None, micro_batch_size=4, grad_accum=8)
    TV = 4 * 512 * 32_000
    assert step.loss.held == 4 * TV == 262_144_000
    assert _phase(step, "backward-block")["logits_loss"] == _phase(step, "optimizer-step")["logits_loss"] == 4 * TV
    hf = _step("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", framework="hf", framework_version=None,
               method="full", quantize="none", optimizer="adamw", lora_targets=None, lora_rank=None)
    assert "logits_loss" not in _phase(hf, "optimizer-step")  # the Trainer's step function has returned


def test_the_carried_logits_are_one_figure_for_the_calls_end_and_a_blocks_forward():
    """retained_graph.carried_logits: litgpt's fp32 logits, torchtune 0.1's shifted copy, nothing elsewhere; the one
    figure contributions.previous_step puts beside a block's forward and carried_logits_forward at the call's end."""
    from vramfit.estimate.retained_graph import carried_logits, carried_logits_forward

    lora = {"method": "lora", "quantize": "none", "optimizer": "adamw", "lora_targets": ["q_proj", "v_proj"]}
    TV = 1024 * 32_000
    step = _step("meta-llama/Llama-2-7b-hf", **lora)
    assert carried_logits(step) == step.loss.held == 4 * TV == 131_072_000
    assert carried_logits_forward(step, 0)[2] == 4 * TV
    tt = _step("meta-llama/Llama-2-7b-hf", framework="torchtune", framework_version="torchtune-0.1", **lora)
    assert carried_logits(tt) == tt.loss.kept == 4 * TV
    assert carried_logits(_step("meta-llama/Llama-2-7b-hf", framework_version=None, **lora)) == 0  # longest first
    assert carried_logits(_step("meta-llama/Llama-2-7b-hf", framework="hf", framework_version=None, **lora)) == 0
