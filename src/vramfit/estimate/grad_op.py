"""FSDP SHARD_GRAD_OP (``parallelism: fsdp-grad-op``; FSDP2 ``reshard_after_forward=False``): which gathered
copies are alive in which phase of the step.

Every unit is gathered in its forward and stays gathered until its own post-backward (torch v2.13.0
distributed/fsdp/_fully_shard/_fsdp_param_group.py: ``reshard`` returns in forward when ``not
self._reshard_after_forward``; ``post_backward`` reshards, ``reshard_after_backward`` defaulting True. FSDP1:
_runtime_utils.py ``_post_forward_reshard`` frees only for FULL_SHARD / HYBRID_SHARD, ``_should_free_in_backward``
frees in the post-backward whenever gradients sync). So ``parts.comm_buffers`` (core.comm_buffers) holds every
block's and the root's unsharded copy from the end of forward to the start of backward, the step's high point
for the gathered weights; backward then reshards the blocks one by one from the top, so the lowest block's
backward holds its own copy and the root's only, and the optimizer step none (the sharded parameters alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.scenario import Method, Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def _block_bytes(step: Step) -> int:
    sc = step.sc
    if sc.parallelism is not Parallelism.FSDP_GRAD_OP or sc.num_gpus < 2:
        return 0
    from vramfit.estimate.step_grads import fsdp1_no_sync

    if sc.grad_accum > 1 and not sc.optimizer_in_backward and fsdp1_no_sync(sc, step.profile):
        # FSDP1 under no_sync frees nothing in backward (_runtime_utils.py _should_free_in_backward: `_sync_gradients
        # or` a reshard-after-forward strategy), so every micro-batch but the last keeps all blocks gathered
        # through its backward beside the held gradients (checked on CPU/gloo: SHARD_GRAD_OP's unsharded storage
        # still allocated after a no_sync backward, freed after the synced one)
        return 0
    from vramfit.estimate.core import _layer_param_bytes

    return _layer_param_bytes(step.spec, sc, step.profile)


def resharded_above_lowest(step: Step) -> int:
    """Bytes of the gathered blocks resharded by the time the lowest block runs its backward (every block above
    it, each by its own post-backward); 0 outside fsdp-grad-op."""
    return max(0, step.spec.num_hidden_layers - 1) * _block_bytes(step)


def resharded_after_blocks(step: Step) -> int:
    """Bytes of the gathered blocks resharded once every block's backward has run (only the root's copy remains,
    until its own post-backward at the end of backward); 0 outside fsdp-grad-op."""
    return step.spec.num_hidden_layers * _block_bytes(step)


def unit_grads_not_yet_made(step: Step) -> int:
    """Bytes of the unit gradients ``parts.comm_buffers`` counts under fsdp-grad-op full fine-tuning (core.comm_buffers:
    a unit's whole gradients and its reduce-scatter copy, 2 x one block) that do not exist yet in forward and the
    loss's backward: a unit's post-backward makes them (torch v2.13.0 distributed/fsdp/_fully_shard/
    _fsdp_param_group.py ``post_backward`` -> _fsdp_collectives.py ``foreach_reduce``; FSDP1 _runtime_utils.py
    ``_post_backward_hook``). The simulator's TRL GRPO step of a 3-layer Mistral-7B under accelerate's FSDP2 grad-op
    holds no gradient in forward (the estimate read +11 % with them there)."""
    sc = step.sc
    if sc.parallelism is not Parallelism.FSDP_GRAD_OP or sc.method is not Method.FULL:
        return 0
    from vramfit.estimate.core import _layer_param_bytes

    return 2 * _layer_param_bytes(step.spec, sc, step.profile)


__all__ = ["resharded_above_lowest", "resharded_after_blocks", "unit_grads_not_yet_made"]
