"""FSDP1 (``FullyShardedDataParallel``, FULL_SHARD): how many block units are gathered at each moment of the step.

``core.comm_buffers`` counts the root unit and ``FSDP_INFLIGHT_ALLGATHERS`` block units: what the unshard stream holds
(the rate limiter lets two all-gathers be in flight, torch v2.13.0 distributed/fsdp/_limiter_utils.py). The live
(allocated) bytes differ by moment, in the code that runs (torch v2.13.0 distributed/fsdp/_runtime_utils.py):

1. Forward: ``_pre_forward_unshard`` gathers a unit when its forward starts, and ``_post_forward_reshard`` frees it
   when its forward ends (``_reshard`` -> ``_free_unsharded_flat_param`` for RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES:
   FULL_SHARD), before the next unit's pre-forward; explicit forward prefetch is off (``forward_prefetch=False``, the
   constructor's default, which accelerate v1.16.0 ``FSDP_FORWARD_PREFETCH`` and Lightning leave). So one block unit
   is live in a block's forward, and none at the logits and the loss, where only the root (kept gathered after its
   forward) is. The freed block's segment is ``record_stream``-ed to the default stream, so the next all-gather, on
   the unshard stream, cannot reuse it until the block's kernels have run: the unshard stream's pool still holds
   two block units and the root ("forward currently requires 2x all-gather buffer size", torch docs notes/fsdp.rst),
   which the reserved figure keeps (:func:`unshard_pool_idle`).
2. The loss's backward: the root's pre-backward hook, registered on the root's forward outputs, prefetches the unit
   that ran forward last (``_pre_backward_hook`` -> ``_prefetch_handle``, BACKWARD_PRE: accelerate's and torch's
   default), the top block. Where the loss is computed inside the model's forward (``loss_in_model_forward``) the
   hook fires on the loss's gradient, so that block is gathered while the loss's backward runs; elsewhere it fires
   after the logits' gradient exists, past the loss's high point.
3. A block's backward: its own unit and the prefetched one below it (the generic two). The lowest block has no block
   below to prefetch (``reentrant_fsdp1.lowest_block_gathers``). Where each LoRA A and B is a unit of its own (PEFT's
   ``fsdp_auto_wrap_policy``, which the HF Trainer sets, and Answer.AI's train.py policy), the prefetch goes to a block's
   own adapters first (:func:`adapter_units_prefetch`).
4. The end of backward: a unit's ``_post_backward_hook`` runs when its FlatParameter's gradient is accumulated, after
   the unit's backward: the lowest block's recompute and working set are freed by then, and its whole gradient,
   every shard made so far and the output layer's gradient (waiting for the root's) are what that moment holds.

5. The root unit's gathered parameters are a buffer of their own: ``_alloc_padded_unsharded_flat_param`` sizes
   ``_full_param_padded`` to the whole unit while ``_local_shard`` keeps the shard (core.comm_buffers). Checked on real
   FSDP1 (CPU/gloo, 2 ranks, a frozen bf16 root): at the output layer's forward the two storages are distinct, the
   unsharded one the unit's whole 262,272 B.

The simulator runs FSDP1 itself on a fake process group (tests/sim/test_sim_fsdp1.py): a 4-layer Llama (hidden 1,024,
vocabulary 4,096), full fine-tuning on 2 to 8 ranks, holds only the root at its logits and two block units in a middle
block's backward; the estimate, with two blocks gathered at every moment and the root counted without its shard,
read +7.8 % (bf16) and +12.3 % (bf16-mixed) above the trace's peak at 4 ranks, -1.9 % and +0.5 % now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS
from vramfit.scenario import Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.profile_fields import FrameworkProfile
    from vramfit.estimate.step import Step
    from vramfit.scenario import Scenario


class BlockEnd(tuple):
    """A block-phase moment (gradients, activations, autocast copies, communication) at the end of a block's backward,
    where its working set is freed: the phase counts no block transient there (contributions.temporaries)."""

    working_set_freed = True


def fsdp1_full_shard(sc: Scenario, profile: FrameworkProfile) -> bool:
    """FSDP1 FULL_SHARD over more than one GPU, the moments this module models (not FSDP2, fsdp-grad-op, one shard or
    a TP/PP rank's own layout)."""
    return not (profile.fsdp2 or sc.parallelism is not Parallelism.FSDP or sc.shard_group < 2 or sc.per_rank_layout)


def fsdp1_gathered_blocks(step: Step) -> int:
    """Bytes of the block units' all-gathers ``parts.comm_buffers`` counts under :func:`fsdp1_full_shard` (0
    elsewhere)."""
    sc = step.sc
    if not fsdp1_full_shard(sc, step.profile) or not step.spec.num_hidden_layers:
        return 0
    from vramfit.estimate.core import _layer_param_bytes

    return min(step.parts.comm_buffers, FSDP_INFLIGHT_ALLGATHERS.value * _layer_param_bytes(step.spec, sc, step.profile))


def _one_block(step: Step) -> int:
    """Bytes of one block unit's all-gather among :func:`fsdp1_gathered_blocks` (0 outside FSDP1 FULL_SHARD)."""
    return fsdp1_gathered_blocks(step) // FSDP_INFLIGHT_ALLGATHERS.value


def forward_unprefetched(step: Step) -> int:
    """Bytes of block all-gathers counted in ``parts.comm_buffers`` that are not live in a block's forward (module
    docstring, 1): all but one block unit under FSDP1 FULL_SHARD, else 0."""
    return fsdp1_gathered_blocks(step) - _one_block(step)


def loss_backward_prefetch(step: Step) -> int:
    """Bytes of the top block the root's pre-backward gathers during the loss's backward (module docstring, 2)."""
    if not step.profile.loss_in_model_forward or not step.profile.fsdp_root_gathered:
        return 0
    return _one_block(step)


def fsdp1_second_lowest(step: Step, lowest: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    """The second-lowest block's backward under FSDP1 FULL_SHARD, from the lowest block's (gradients, activations,
    autocast copies, communication) tuple: one block's shard not made yet, one more block's kept tensors, and the
    lowest block prefetched beside it (module docstring, 3), which the lowest block's own backward no longer has.
    Where a gathered block outweighs a block's shard the blocks' backward peaks there: the simulator's 4-layer Llama
    (full, bf16, 4 ranks, 2 x 512 tokens) at its layer 1, 233,636,436 B against 215,807,572 B at layer 0. Full
    fine-tuning: the larger of that moment and the end of the block's backward, its weight gradients and their cat
    (module docstring, 3) beside every shard above it, where a block's gradients outweigh its recompute (the
    simulator's 32-layer Llama-2-7B, bf16-mixed on 8 ranks at 1 x 1,024 tokens: -3.0 % without it)."""
    from vramfit.estimate.reentrant_fsdp1 import lowest_block_gathers
    from vramfit.estimate.step_grads import fsdp1_lowest_made, fsdp1_split_cat_grads

    gap = lowest_block_gathers(step.spec, step.sc, step.profile)
    if not fsdp1_gathered_blocks(step) or not gap or step.spec.num_hidden_layers < 2:
        return None
    if _adapter_units_delay(step):  # the lowest is only prefetched in the tail, below the top block's moments
        return None
    grads, acts, copies, comm = lowest
    mid = max(0, grads - step.layer_grads), acts + step.acts.lowest, copies, comm + gap
    spec, sc, prof = step.spec, step.sc, step.profile
    if not (cat := fsdp1_split_cat_grads(spec, sc, prof)) or step.held_grads:
        return mid
    # the end of its backward: its weight gradients and their cat, every shard above it, its recompute freed
    shards = max(0, grads - step.layer_grads - fsdp1_lowest_made(spec, sc, prof))
    end = BlockEnd((shards + cat, step.acts.lowest + step.acts.masks, copies, comm + gap))
    return max(mid, end, key=sum)


def fsdp1_tied_end(step: Step, out_of_place: bool) -> tuple[int, int, int] | None:
    """FSDP1 FULL_SHARD full fine-tuning of a model with tied embeddings, the end of backward (module docstring, 4), as
    FSDP2's ``estimate/fsdp2.py tied_end``: (the blocks' reduced shards, the shared weight's whole gradients, the gathered
    root); None elsewhere. The shared weight's output-layer gradient has waited in autograd's input buffer since the top
    of backward and the embedding's own meets it there, added out of place where the first is a view: three weight-sized
    tensors, with every block resharded and reduced and the root, which holds the weight, gathered. The simulator's FSDP1
    of Llama-3.2-1B (full, bf16, 2 GPUs, 1 x 512) peaks there: 6,805,320,192 B, the shared weight gathered and its three
    525,336,576 B gradients (the estimate read -9.0 % before the FSDP1 moments)."""
    if not (fsdp1_gathered_blocks(step) and step.spec.tie_word_embeddings and step.parts.num_trainable):
        return None
    from vramfit.estimate.fsdp2 import tied_gradients

    shards, whole = tied_gradients(step, out_of_place)
    return shards, whole, step.parts.comm_buffers - fsdp1_gathered_blocks(step)


def _adapter_units_delay(step: Step) -> int:
    """Bytes of the block unit whose gather the adapter units delay (:func:`adapter_units_prefetch`), 0 where that does
    not happen: full fine-tuning, adapters inside the block's FlatParameter (``fsdp1_units.mixed_block_units``), or a
    block whose first adapter in forward is not an attention input projection (its backward then ends with attention's
    or the MLP's whole working set, not a short tail)."""
    from vramfit.estimate.fsdp1_units import mixed_block_units
    from vramfit.scenario import Method

    sc, profile = step.sc, step.profile
    if sc.method is Method.FULL or not fsdp1_gathered_blocks(step) or mixed_block_units(sc, profile):
        return 0
    attn = [lin.name for lin in step.spec.block_linears if lin.group == "attn"]
    adapted = {ad.target for ad in step.adapters}
    if not any(name in adapted for name in attn[:-1]):  # every attention linear but the output projection
        return 0
    return _one_block(step)


def _prefetch_tail(step: Step) -> int:
    """Bytes a block's backward still holds, beside its kept tensors, once its first adapter (q_proj's A) starts its
    backward: the input norm's saved input (fp32 where the norm upcasts), that adapter's input cast to the adapter
    dtype (PEFT, where the adapters are wider than the input), and three residual-stream gradients (the block output's,
    the norm output's being summed over q/k/v, and q's). The simulator's FSDP1 LoRA trace of a 4-layer Llama (bf16,
    2 x 512 tokens, hidden 1,024) holds exactly these five at each second block all-gather in backward: 4 + 4 + 3 x 2 MiB."""
    from vramfit.estimate.saved import dtypes_for

    d = dtypes_for(step.sc, step.profile, step.spec)
    th = step.sc.micro_batch_size * step.sc.seq_len * step.spec.hidden_size
    norm = 4 if step.profile.rmsnorm_upcast else d.residual
    cast = d.adapter if step.profile.lora_casts_input and d.adapter > d.norm_out else 0
    return th * (norm + cast + 3 * d.residual)


def adapter_units_prefetch(step: Step, moment: tuple[int, int, int, int], recompute: int) -> tuple[int, ...]:
    """A block-backward moment (gradients, activations, autocast copies, communication) that counts two gathered blocks
    and the block's recompute, as FSDP1 runs it where each adapter is a unit of its own (:func:`_adapter_units_delay`).

    BACKWARD_PRE prefetches the unit before the current one in post-forward order (torch v2.13.0
    distributed/fsdp/_exec_order_utils.py ``get_handle_to_backward_prefetch``: ``handles_post_forward_order
    [current_index - 1]``, called from _runtime_utils.py ``_pre_backward_hook`` -> ``_prefetch_handle``). A block's
    adapters end their forward before the block does, so the block's pre-backward prefetches its own last adapter, each
    adapter the one before it, and the block below is gathered only when the block's first adapter (q_proj's A) starts
    its backward: through the recompute and working set one block is gathered, and two only for the tail after it
    (:func:`_prefetch_tail`), the working set freed. The larger of the two; ``moment`` itself elsewhere. Traced
    (tests/sim/test_sim_fsdp1.py): at a block's backward peak full fine-tuning holds two block units, LoRA one."""
    block = _adapter_units_delay(step)
    if not block:
        return moment
    grads, acts, copies, comm = moment
    working = (grads, acts, copies, comm - block)
    tail = BlockEnd((grads, acts - recompute + _prefetch_tail(step), copies, comm))
    return max(working, tail, key=sum)


def unshard_pool_idle(step: Step, phases: dict[str, dict[str, int]], allocated: int) -> int:
    """Reserved bytes the unshard stream keeps beyond the allocated peak (module docstring, 1): its pool holds the root
    and two block units throughout (``parts.comm_buffers``), beside the default stream's high-water, every training
    phase's bytes but its gathered ones (blocks cached on one stream never serve another, CUDACachingAllocator.cpp); 0 outside
    FSDP1 FULL_SHARD. ``phases``: each phase's allocated components; ``allocated``: the peak phase's total."""
    from vramfit.estimate.phases import TRAINING_PHASES

    training = [parts for name, parts in phases.items() if name in {p.value for p in TRAINING_PHASES}]
    if not fsdp1_gathered_blocks(step) or not training:
        return 0
    default = max(sum(parts.values()) - parts.get("comm_buffers", 0) for parts in training)
    return max(0, default + step.parts.comm_buffers - allocated)


__all__ = ["BlockEnd", "adapter_units_prefetch", "fsdp1_full_shard", "fsdp1_gathered_blocks", "fsdp1_second_lowest",
           "fsdp1_tied_end", "forward_unprefetched", "loss_backward_prefetch", "unshard_pool_idle"]
