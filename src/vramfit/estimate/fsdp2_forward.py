"""FSDP2's forward copy-out: the previous unit's all-gather output outlives this unit's copy-out.

torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_param_group.py ``FSDPParamGroup.wait_for_unshard`` (l. 417-483),
in forward: ``if prev_all_gather_state := self.comm_ctx.all_gather_state: ...; self.comm_ctx.all_gather_state =
None  # free the all-gather result``, then ``foreach_all_gather_copy_out`` allocates this unit's unsharded
parameters. The walrus binds a local that still references the previous unit's ``AllGatherState`` until the
function returns, so that output is freed only after the copy-out: a block's forward starts with three block-sized
buffers (the previous block's all-gather output, its own, and its own unsharded parameters), not two. The simulator
runs that code: a tiny Granite-MoE LoRA under accelerate's FSDP2 peaks in forward at block 2's copy-out with blocks
1 and 2's 127,674,368 B all-gather outputs and block 2's 125,829,120 B of unsharded weights live (506,394,112 B;
the estimate without this read 378,452,736 B for forward). The first FSDP2 (torch 2.3's
_composable/fsdp/_fsdp_param_group.py: ``all_gather_state.pop()`` then ``del prev_all_gather_state  # free``)
freed it before the copy-out; the local form is already in pytorch/pytorch@012c62d6
torch/distributed/_composable/fsdp/_fsdp_param_group.py (the torch 2.4-era FSDP2 that torchtune 0.3 ran)."""

from __future__ import annotations

from typing import Any


def previous_gather_at_copy_out(step: Any) -> int:
    """Bytes the copy-out moment holds beyond a block's forward moment the step already counts (the block's own
    all-gather output and unsharded parameters in ``parts.comm_buffers``): the previous block's all-gather output,
    less what the block's forward makes after it (its kept tensors, its de-quantized weight or fetched copy).
    0 outside FSDP2 or with a single block. ``step``: the estimator's Step."""
    from vramfit.estimate.fsdp2 import _runs_fsdp2, gathered_blocks

    if grad_op_fsdp2(step):
        return _grad_op_copy_out(step)
    if not _runs_fsdp2(step) or step.spec.num_hidden_layers < 2:
        return 0
    from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS

    layer = gathered_blocks(step) // FSDP_INFLIGHT_ALLGATHERS.value
    # at the copy-out the block has kept nothing yet (forward counts every block's kept tensors)
    kept = step.acts.blocks // step.spec.num_hidden_layers
    return max(0, layer - block_working(step) - kept)


def block_working(step: Any) -> int:
    """Bytes a block's forward makes for its weights beyond the gathered ones: the larger of its de-quantized weight
    and its fetched copy (one stands in for the other). ``step``: the estimator's Step."""
    return max(step.dequant, step.fetch_copy[0])


def grad_op_fsdp2(step: Any) -> bool:
    """FSDP2 with ``reshard_after_forward=False`` (fsdp-grad-op) over more than one GPU and block."""
    from vramfit.estimate.fsdp2 import fsdp2_shards
    from vramfit.scenario import Parallelism

    sc = step.sc
    return (sc.parallelism is Parallelism.FSDP_GRAD_OP and fsdp2_shards(sc, step.profile, grad_op=True)
            and step.spec.num_hidden_layers >= 2)


def _grad_op_copy_out(step: Any) -> int:
    """fsdp-grad-op's top block in forward, beyond ``parts.comm_buffers`` (every unit's unsharded copy, its own
    included): its all-gather output, kept as ``comm_ctx.all_gather_state`` through its forward, and at its
    copy-out the block below's too (the walrus local of ``wait_for_unshard``, module docstring), less what the block's
    forward makes after the copy-out (its kept tensors, its de-quantized weight), and less accelerate's tail unit
    (norm and lm_head, estimate/fsdp2.py, 4), first gathered after the blocks. The simulator's 8-layer Llama QLoRA
    under FSDP2 grad-op peaks there, blocks 6's and 7's 22,093,824 B uint8 all-gather outputs beside every block's
    unsharded weights and the embedding's, no lm_head (estimated -0.5 %; +7.9 % while the gathered blocks counted their
    absmax, -8.5 % against FSDP1's model, which has no such output)."""
    from vramfit.estimate.core import _layer_param_bytes

    out = _layer_param_bytes(step.spec, step.sc, step.profile)
    kept = step.acts.blocks // step.spec.num_hidden_layers
    return out + max(0, out - block_working(step) - kept) - tail_gather_output(step)


def tail_gather_output(step: Any) -> int:
    """Bytes of the untied tail unit's all-gather output alive at forward's logits and loss (estimate/fsdp2.py
    module docstring, 4),
    under fsdp-grad-op too: accelerate makes the same units with ``reshard_after_forward=False`` (v1.15.0
    utils/fsdp_utils.py fsdp2_prepare_model), and the tail is still the last unit gathered in forward. The simulator's
    3-layer Phi-3-mini LoRA under accelerate's FSDP2 grad-op holds the 197,001,216 B lm_head all-gather output beside
    its unsharded copy at the loss (the estimate read -6.5 % without it). Only where the loss runs inside the model's
    forward (``loss_in_model_forward``): torchtitan 0.3 computes it after the model returns, when the root's
    post-forward has freed that output (torch v2.13.0 _fsdp_state.py ``_post_forward``)."""
    from vramfit.estimate.fsdp2 import _root_part, fsdp2_shards

    sc, prof = step.sc, step.profile
    if not (fsdp2_shards(sc, prof, grad_op=True) and prof.fsdp2_tail_unit and step.spec.lm_head_params
            and prof.loss_in_model_forward):
        return 0
    return _root_part(step, tail=True)
