"""FSDP1 gradient accumulation under the HF Trainer's no_sync: each GPU holds the whole unsharded gradients
between micro-batches, in FSDP's 16-bit param_dtype (estimate/step_grads.py _fsdp1_no_sync_grads)."""

from __future__ import annotations

from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed", "seq_len": 2048,
        "num_gpus": 8, "parallelism": "fsdp", "attention": "flash", "gradient_checkpointing": "full", "grad_accum": 2}
SPEC = resolve_model(BASE["model"]).spec
LLAMA_8B_PARAMS = 8_030_261_248


def _step(**extra):
    return compute(SPEC, parse_scenario({**BASE, **extra}))


def test_full_fine_tune_holds_every_unsharded_gradient_in_bf16():
    step = _step()
    # fp32 shards of 1/8 of the model after the synced micro-batch; bf16 whole gradients in between
    assert step.parts.gradients == LLAMA_8B_PARAMS * 4 // 8 == 4_015_130_624
    assert step.held_grads == LLAMA_8B_PARAMS * 2 == 16_060_522_496
    # the output layer's held one is added into only once its new one, made whole beside it, has waited for the root's
    # split backward (estimate/step_grads.py _gradient_timing; 0 here until 2026-12-06, -5.1 % against the simulator)
    assert step.head_grad == 128256 * 4096 * 2
    assert _step(precision="fp32").held_grads == LLAMA_8B_PARAMS * 4
    assert _step(parallelism="fsdp-grad-op").held_grads == LLAMA_8B_PARAMS * 2


def test_one_micro_batch_syncs_at_once():
    step = _step(grad_accum=1)
    assert step.held_grads == 0 and step.head_grad == 128256 * 4096 * 2


def test_lora_holds_its_adapters_whole_even_with_the_shards_offloaded():
    lora = {"method": "lora", "precision": "bf16-true"}
    step = _step(**lora)
    adapters = step.parts.num_trainable
    assert adapters == 41_943_040
    assert step.parts.gradients == adapters * 4 // 8  # peft's fp32 adapters, sharded
    assert step.held_grads == adapters * 2 == 83_886_080  # cast to bf16 by FSDP's MixedPrecision
    off = _step(**lora, offload="optimizer+params")
    # the shards stay on the GPU as _saved_grad_shard to the end of backward (estimate/state.py fsdp1_keeps_grad_shards)
    assert off.parts.gradients == adapters * 4 // 8 and off.held_grads == 83_886_080


def test_answer_ais_loop_accumulates_shards_unless_told_otherwise():
    step = _step(framework_version="fsdp-qlora")
    assert scenario_profile(parse_scenario({**BASE, "framework_version": "fsdp-qlora"})).fsdp_unsharded_accum_grads is False
    assert step.held_grads == step.parts.gradients == 4_015_130_624


def test_the_peak_grows_by_the_unsharded_gradients_less_the_shards():
    """The same run with the shards accumulating (Answer.AI's loop, otherwise the same profile here) peaks in the
    same phase, lower by exactly the difference of the held gradients."""
    from vramfit.estimate import estimate

    hf = estimate(parse_scenario(BASE)).peak
    aai = estimate(parse_scenario({**BASE, "framework_version": "fsdp-qlora"})).peak
    assert hf.phase == aai.phase == "backward-loss"
    assert hf.allocated_bytes - aai.allocated_bytes == LLAMA_8B_PARAMS * 2 - 4_015_130_624 == 12_045_391_872


def test_shard_grad_op_keeps_every_block_gathered_through_a_no_sync_backward():
    """FSDP1 frees an unsharded parameter in backward only when gradients sync (_should_free_in_backward)."""
    from vramfit.estimate.grad_op import resharded_above_lowest, resharded_after_blocks

    block = 218_112_000 * 2  # one Llama-3.1-8B block gathered in bf16
    synced = _step(parallelism="fsdp-grad-op", grad_accum=1)
    assert (resharded_above_lowest(synced), resharded_after_blocks(synced)) == (31 * block, 32 * block)
    aai = _step(parallelism="fsdp-grad-op", framework_version="fsdp-qlora")
    assert resharded_above_lowest(aai) == 31 * block == 13_522_944_000
    no_sync = _step(parallelism="fsdp-grad-op")
    assert (resharded_above_lowest(no_sync), resharded_after_blocks(no_sync)) == (0, 0)


def test_answer_ais_loop_turns_no_sync_on_with_cpu_offload():
    """fsdp_qlora@4cd6923 train.py l. 1063-1064: --use_cpu_offload with accumulation forces --no_sync."""
    lora = {"method": "lora", "precision": "bf16-true", "framework_version": "fsdp-qlora"}
    assert _step(**lora, offload="optimizer+params").held_grads == 83_886_080  # bf16 adapters, whole
    assert _step(**lora).held_grads == 20_971_520  # fp32 shards of 41,943,040 adapter elements over 8 GPUs
