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
