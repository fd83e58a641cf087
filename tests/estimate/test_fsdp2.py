"""FSDP2 (torchtune, torchtitan): the flat reduce-scatter input and the blocks resharded after forward
(estimate/fsdp2.py), and torchtune 0.1's FSDP1 recipes (framework_version torchtune-0.1)."""

from vramfit.estimate import estimate
from vramfit.estimate.contributions import _block_position
from vramfit.estimate.core import _layer_param_bytes
from vramfit.estimate.framework import profile_for
from vramfit.estimate.fsdp2 import (
    blocks_freed_at_loss,
    end_of_backward,
    forward_at_logits,
    gathered_blocks,
    held_reduce_scatter_input,
    reduce_scatter_input,
    second_lowest_block,
)
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

L8 = resolve_model("meta-llama/Llama-3.1-8B").spec
L70 = resolve_model("meta-llama/Llama-3.1-70B-Instruct").spec
V = 128256
# Llama-3.1-8B block: q, o 4096x4096; k, v 1024x4096; gate, up, down 14336x4096; two RMSNorm weights
BLOCK_8B = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 2 * 4096


def _sc(**keys):
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 2048, "micro_batch_size": 2,
            "num_gpus": 8, "parallelism": "fsdp", "gradient_checkpointing": "full"}
    return parse_scenario({**base, **keys})


def _phase(step, name):
    return dict(next(p for p in step.phases if p.phase.value == name).parts)


def test_torchtitan_reduce_scatter_input_is_the_root_unit_in_fp32():
    step = compute(L8, _sc(framework="torchtitan", framework_version="torchtitan-0.2.2"))
    root_in = 4 * (2 * V * 4096 + 4096)  # v0.2.2's root unit (tok_embeddings, norm, output); reduce_dtype=fp32
    assert reduce_scatter_input(step) == root_in
    # the lowest block's backward holds the fp32 input of the block above and has no block below to prefetch
    blocks = 2 * _layer_param_bytes(L8, step.sc, step.profile)
    assert gathered_blocks(step) == blocks == 2 * 2 * BLOCK_8B
    assert held_reduce_scatter_input(step) == 4 * BLOCK_8B - 2 * BLOCK_8B
    # the end of backward peaks at the root's reduce-scatter: its input and the embedding's bf16 gradient (made
    # after the lowest block's backward) beside every sharded gradient and the output layer's; the blocks, their
    # gradients, recompute and working set are gone, and the root was resharded before its reduce
    at_root, comm, embed_grad = end_of_backward(step)
    assert at_root and comm == root_in and embed_grad == 2 * V * 4096
    end = _phase(step, "backward-end")
    assert end["comm_buffers"] == root_in
    assert end["gradients"] == step.parts.gradients + step.head_grad + 2 * V * 4096
    assert "activations" not in end and "temporaries" not in end


def test_torchtune_reduces_in_bf16_and_shards_the_output_layer_on_its_own():
    step = compute(L70, _sc(model="meta-llama/Llama-3.1-70B-Instruct", framework="torchtune"))
    # custom_sharded_layers: tok_embeddings and output are units of their own, larger than a 70B block
    assert reduce_scatter_input(step) == 2 * V * 8192
    # no MixedPrecisionPolicy: the input is bf16, the size of the output layer's whole gradient it replaces
    assert held_reduce_scatter_input(step, top=True) == 0


def test_no_reduce_scatter_input_for_lora_fsdp1_or_the_step_in_backward():
    for keys in ({"framework": "torchtune", "method": "lora"}, {"framework": "hf"},
                 {"framework": "torchtune", "optimizer_in_backward": True}, {"framework": "torchtitan", "num_gpus": 1}):
        assert reduce_scatter_input(compute(L8, _sc(**keys))) == 0, keys


def test_a_middle_block_holds_two_gathered_blocks_its_whole_gradients_and_the_input_above():
    step = compute(L8, _sc(framework="torchtitan", framework_version="torchtitan-0.2.2", seq_len=512, micro_batch_size=1))
    p = step.parts
    grads, acts, _, extra = second_lowest_block(step)
    assert extra == 4 * BLOCK_8B  # the block above's fp32 input (both gathered blocks are in comm_buffers)
    assert step.block_grads == 2 * BLOCK_8B  # its own whole bf16 gradients, before its post-backward
    # every unit above reduced to its shard, the root's output layer whole (the root reduces last)
    unreduced = 2 * BLOCK_8B + 2 * V * 4096
    assert grads == p.gradients - p.gradients * unreduced // p.num_trainable + step.head_grad + 2 * BLOCK_8B
    assert acts == step.acts.lowest + step.acts.blocks // 32 + step.acts.recompute  # two blocks' kept tensors
    # the lowest block instead: one block gathered (nothing below to prefetch) beside the input above it
    assert held_reduce_scatter_input(step) == 4 * BLOCK_8B - 2 * BLOCK_8B
    chosen = _block_position(step)
    assert chosen == (grads, acts, 0, extra)  # the middle block holds the most here
    assert _phase(step, "backward-block")["comm_buffers"] == p.comm_buffers + extra


def test_blocks_are_resharded_while_the_loss_is_alive():
    tune = compute(L8, _sc(framework="torchtune", method="lora"))
    layer = _layer_param_bytes(L8, tune.sc, tune.profile)
    # torchtune reshards every block after forward: at the loss no block is gathered
    assert blocks_freed_at_loss(tune) == 2 * layer
    assert _phase(tune, "backward-loss").get("comm_buffers", 0) == tune.parts.comm_buffers - 2 * layer
    assert _phase(tune, "backward-block")["comm_buffers"] == tune.parts.comm_buffers
    # torchtitan keeps the last block unsharded after forward (reshard_after_forward=False for it)
    titan = compute(L8, _sc(framework="torchtitan", framework_version="torchtitan-0.2.2"))
    assert blocks_freed_at_loss(titan) == _layer_param_bytes(L8, titan.sc, titan.profile)
    # FSDP1 FULL_SHARD (HF / accelerate) reshards every block after its forward too (estimate/fsdp1_moments.py)
    hf = compute(L8, _sc(framework="hf", method="lora"))
    assert blocks_freed_at_loss(hf) == 2 * _layer_param_bytes(L8, hf.sc, hf.profile)


def test_forward_peaks_at_the_logits_or_at_a_block_not_both():
    step = compute(L8, _sc(framework="torchtune", method="lora"))
    fwd = _phase(step, "forward")
    assert forward_at_logits(step) is True  # 2 x 2048 x 128256 fp32 logits outweigh two 8B blocks
    assert fwd["logits_loss"] == step.loss.forward_peak and "temporaries" not in fwd
    assert fwd.get("comm_buffers", 0) == step.parts.comm_buffers - blocks_freed_at_loss(step)
    hf = compute(L8, _sc(framework="hf", method="lora"))  # FSDP1: the logits beside the root alone
    assert forward_at_logits(hf) is True
    assert _phase(hf, "forward")["comm_buffers"] == hf.parts.comm_buffers - blocks_freed_at_loss(hf)
    ddp = compute(L8, _sc(framework="hf", method="lora", parallelism="ddp"))
    assert forward_at_logits(ddp) is None  # no gathered unit: the generic model


def test_torchtune_0_1_runs_fsdp1_over_a_cpu_loaded_model():
    old = profile_for(Framework.TORCHTUNE, "torchtune-0.1")
    assert not old.fsdp2 and old.fsdp1_host_wrap and old.fsdp1_sync_module_states and old.fsdp_root_gathered
    sc = {"model": "meta-llama/Llama-2-7b-hf", "framework": "torchtune", "method": "full", "num_gpus": 4,
          "parallelism": "fsdp", "micro_batch_size": 2, "seq_len": 512, "gpu": "rtx4090"}
    new, v01 = estimate(sc), estimate({**sc, "framework_version": "torchtune-0.1"})
    # the wrap leaves each unit's moved and flattened parameters cached; the root stays gathered
    assert v01.peak.reserved_bytes > new.peak.reserved_bytes
    assert v01.peak.allocated_bytes > new.peak.allocated_bytes


def test_accumulated_shards_leave_each_backwards_whole_gradients():
    """FSDP2 reduce-scatters every micro-batch into the held shards (estimate/fsdp2.py, 6): with grad_accum 2 a
    middle block's backward holds every shard, the block's whole bf16 gradients and the output layer's whole
    gradient (the torchtitan root reduce-scatters last), so it never needs less than grad_accum 1."""
    one, two = (compute(L8, _sc(framework="torchtitan", framework_version="torchtitan-0.2.2", precision="bf16-true", grad_accum=n)) for n in (1, 2))
    assert two.held_grads == two.parts.gradients == 2 * (2 * V * 4096 + 32 * BLOCK_8B + 4096) // 8 == 2_007_565_312
    assert two.head_grad == 2 * V * 4096 == 1_050_673_152
    assert two.block_grads == 2 * BLOCK_8B == 436_224_000
    assert _block_position(two)[0] == two.parts.gradients + two.head_grad + two.block_grads
    assert max(p.total for p in two.phases) >= max(p.total for p in one.phases)


def test_torchtune_lora_recipes_keep_the_root_unit_gathered():
    """torchtune v0.4.0 sets custom_sharded_layers only in its *_full.yaml configs: under LoRA/QLoRA,
    tok_embeddings, norm and output stay in the root unit, which torch 2.4-2.7 never reshards after forward
    (profile_fields.py fsdp_root_unit_methods)."""
    assert profile_for(Framework.TORCHTUNE).fsdp_root_gathered is False  # full fine-tuning's own units
    model = {"model": "meta-llama/Llama-3.1-70B-Instruct", "framework": "torchtune"}
    full = compute(L70, _sc(**model))
    lora = compute(L70, _sc(**model, method="lora"))
    qlora = compute(L70, _sc(**model, method="qlora", quantize="nf4-dq"))
    assert not full.profile.fsdp_root_gathered
    assert lora.profile.fsdp_root_gathered and qlora.profile.fsdp_root_gathered
    root = (2 * V * 8192 + 8192) * 2  # bf16 embedding, output layer and final norm, 4_202_708_992 bytes
    for step in (lora, qlora):
        assert step.parts.comm_buffers == 2 * _layer_param_bytes(L70, step.sc, step.profile) + root
    assert lora.parts.comm_buffers - 2 * _layer_param_bytes(L70, lora.sc, lora.profile) == 4_202_708_992
