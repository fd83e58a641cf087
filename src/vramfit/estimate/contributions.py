"""Who is alive at the high point of each phase: contributors turn a :class:`Step` into
:class:`Contribution` objects, and a phase's peak is the sum of its contributions.

A contributor owns one or a few components and says how large each is in every phase. A training
stage or a framework that keeps something more adds a contributor (``phase_breakdowns(step,
CONTRIBUTORS + (mine,))``) and, if it has a phase of its own, a rule in ``PHASE_RULES``; the core
functions stay as they are (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.cast_load import cast_load_phase, casts_on_load
from vramfit.estimate.core import zero3_head_on_top
from vramfit.estimate.deepspeed import ipg_made_in_backward, zero3_head_grad_flushed
from vramfit.estimate.ds_load import flatten_load_phase, flattens_on_gpu
from vramfit.estimate.ds_offload import norm_transients, offload_grad_staging
from vramfit.estimate.evaluation import evaluates, evaluation_pass
from vramfit.estimate.framework import LoopCarry
from vramfit.estimate.fsdp1_moments import (
    BlockEnd,
    adapter_units_prefetch,
    forward_unprefetched,
    fsdp1_gathered_blocks,
    fsdp1_second_lowest,
    fsdp1_tied_end,
)
from vramfit.estimate.fsdp2 import (
    _grad_bytes,
    blocks_freed_at_loss,
    end_of_backward,
    forward_at_logits,
    held_reduce_scatter_input,
    prefetched_at_loss_backward,
    root_resharded,
    second_lowest_block,
    split_root,
    tied_end,
)
from vramfit.estimate.fsdp2_forward import previous_gather_at_copy_out, tail_gather_output
from vramfit.estimate.grad_op import resharded_above_lowest, resharded_after_blocks, unit_grads_not_yet_made
from vramfit.estimate.loss import head_autocast_calls, head_grad_is_view, projection_stage
from vramfit.estimate.moe_lora import fsdp2_lora_middle_block, position_kinds
from vramfit.estimate.mxfp4_load import dequantizes_on_gpu, load_phase
from vramfit.estimate.phases import TRAINING_PHASES, Contribution, PhaseBreakdown, StepPhase
from vramfit.estimate.reentrant_fsdp1 import lowest_block_gathers, retained_input_grads
from vramfit.estimate.stages import has_phase
from vramfit.estimate.state import fsdp1_keeps_grad_shards
from vramfit.estimate.step_grads import fsdp1_split_cat_grads
from vramfit.estimate.torchao_optim import in_backward_steps
from vramfit.estimate.vision_backward import embeds_grad_pending, tower_backward_transient, tower_position
from vramfit.estimate.zero12_partition import zero1_step_grads
from vramfit.scenario import Checkpointing, Method, Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.step import Step

Contributor = Callable[["Step"], Iterable[Contribution]]

F, FA, BL, BB, BV, BE, BT, BS, OPT = _ALL = TRAINING_PHASES


def _sharded_full_end(step: Step) -> bool:
    """FSDP full fine-tuning: the end of backward, where every sharded gradient exists while the first block's
    whole gradients, the gathered root and the next unit are still on the GPU (the simulator's FSDP2 trace peaks
    there under checkpointing; ``Step.block_grads``)."""
    return step.block_grads > 0


def _tied_end(step: Step) -> bool:
    """Tied embeddings: the embedding's own gradient (embedding_dense_backward, V x H) meets the
    output layer's, still in autograd's input buffer, at the very end of backward. Only where the one tied weight
    trains: full fine-tuning (LoRA on lm_head leaves it frozen; modules_to_save copies are untied tensors)."""
    return step.spec.tie_word_embeddings and step.sc.method is Method.FULL and not step.sc.optimizer_in_backward


def _tied_sum(step: Step) -> int:
    """Bytes of the tied weight's summed gradient where autograd adds the two out of place, beside both: the output
    layer's, made by one matmul per micro-batch, is a view (estimate/loss.py head_grad_is_view); several head calls
    (torchtune's output chunks, lit-gpt's chunked head: loss.head_autocast_calls counts every call) leave a sum made
    earlier, which takes the embedding's in place (tests/estimate/test_loss_order.py). On one GPU or DDP, as the simulator and the
    measured runs show it; FSDP's and ZeRO's ends keep their own models."""
    if not _tied_end(step) or step.sc.parallelism not in (Parallelism.NONE, Parallelism.DDP):
        return 0
    return step.head_grad if _tied_out_of_place(step) else 0


def _after_post_backward(step: Step) -> bool:
    """The end of backward is a moment after the lowest block's backward, whose tensors and working set are freed:
    FSDP2's last unit's reduce-scatter (estimate/fsdp2.py end_of_backward), FSDP1's post-backward hook of the lowest
    block (estimate/fsdp1_moments.py, 4)."""
    end = end_of_backward(step)
    return (end is not None and end[0]) or fsdp1_gathered_blocks(step) > 0


def _tied_end_moment(step: Step) -> tuple[int, int, int] | None:
    """FSDP's model of the tied end of backward (shards, whole gradients, communication): FSDP2's or FSDP1's."""
    out_of_place = _tied_out_of_place(step)
    return tied_end(step, out_of_place) or fsdp1_tied_end(step, out_of_place)


def _tied_out_of_place(step: Step) -> bool:
    """Whether the tied weight's two gradients are added out of place (:func:`_tied_sum`)."""
    return head_grad_is_view(step.sc, step.profile) and head_autocast_calls(step.sc, step.profile) == 1


# A phase happens in a step when its rule says so; the order here is the order results list them.
PHASE_RULES: dict[StepPhase, Callable[[Step], bool]] = {
    # an MXFP4 checkpoint de-quantized on the GPU (estimate/mxfp4_load.py); ZeRO-1/2's flatten (estimate/ds_load.py);
    # a forced-float32 model cast from bf16 to fp16 (estimate/cast_load.py)
    StepPhase.LOAD: lambda step: dequantizes_on_gpu(step) or flattens_on_gpu(step) or casts_on_load(step),
    StepPhase.GENERATE: lambda step: has_phase(step, StepPhase.GENERATE),
    F: lambda step: True,
    # eager fp32 softmax (block_extras.forward_softmax_moment), a DoRA layer's weight norm (estimate/dora.py)
    FA: lambda step: step.eager_forward[0] > 0 or step.dora_forward > 0,
    StepPhase.SCORE: lambda step: has_phase(step, StepPhase.SCORE),
    BL: lambda step: True,
    BB: lambda step: True,
    BV: lambda step: step.acts.tower > 0,
    BE: _sharded_full_end,
    BT: _tied_end,
    BS: lambda step: in_backward_steps(step.spec, step.sc)[1] > 0,
    OPT: lambda step: not step.sc.optimizer_in_backward,
    StepPhase.EVALUATE: lambda step: evaluates(step),  # eval_batch_size > 0 (estimate/evaluation.py)
}


def model_state(step: Step) -> Iterator[Contribution]:
    """Weights, quantized base, adapters, master weights, workspaces and optimizer state: in every phase."""
    p = step.parts
    for phase in _ALL:
        for name in ("weights", "quantized_base", "adapters", "master_weights", "workspaces", "optimizer_state"):
            yield Contribution(name, phase, getattr(p, name))


def _block_position(step: Step) -> tuple[int, int, int, int]:
    """(gradients, activations, autocast copies, FSDP2's communication bytes beyond ``parts.comm_buffers``) inside
    the block backward that holds more: the top block's or the lowest's.

    Top: every block's kept tensors, the output layer's and one block's gradients. Lowest: only its own kept
    tensors (``acts.lowest``) and autocast weight copies (``step.lowest_autocast``), but every gradient made
    so far (``step.lowest_grads``). Both add the same recompute and working set. Going down, each block
    frees what it kept and adds its gradients, so the high point is at one end: the lowest block when a
    block's gradients outweigh what it keeps (full fine-tuning with checkpointing at a few thousand tokens
    per micro-batch, as the simulator traces it). FSDP2 keeps the unit above's reduce-scatter input through a
    block's backward, and the lowest block has none below to prefetch (estimate/fsdp2.py)."""
    a = step.acts
    # the output layer's autocast copy is freed by its matmul backward; a recomputed top block casts its own again
    top_recompute, top_cast, lowest_recompute = _kind_ends(step)
    recast = top_cast if step.sc.gradient_checkpointing is not Checkpointing.NONE else 0
    # accelerate's split units: only the lowest block prefetches the embedding unit (estimate/fsdp2.py, 4; the
    # simulator's top-block peak of a tiny 4-layer Qwen3-MoE LoRA holds 549,746,176 B of temporaries at vocab 4096
    # and 32768 alike)
    head = 0 if zero3_head_grad_flushed(step.spec, step.sc) else step.head_grad  # reduced at the final norm's
    top = (step.held_grads + head + step.layer_grads, a.blocks + a.masks + top_recompute,
           step.parts.autocast_copies - step.head_autocast + recast,
           held_reduce_scatter_input(step, top=True) - root_resharded(step, backward=False))
    # FSDP1 with each adapter a unit of its own: the block below is prefetched only in the tail (estimate/fsdp1_moments.py)
    top = adapter_units_prefetch(step, top, top_recompute)
    # FSDP1 full fine-tuning: the top block's weight gradients and their cat, its own kept tensors, recompute and
    # working set freed (estimate/fsdp1_moments.py, 3)
    cat = fsdp1_split_cat_grads(step.spec, step.sc, step.profile) if step.layer_grads else 0
    top_cat = BlockEnd((step.held_grads + head + cat, a.blocks - a.lowest + a.masks, top[2], top[3])) if cat else top
    # FSDP1 under reentrant checkpointing (estimate/reentrant_fsdp1.py): in the lowest block's backward every block's
    # input is still kept, with the input gradients of the blocks above it, and every adapter gradient made
    retained = retained_input_grads(step.spec, step.sc, step.profile)
    kept = (step.held_grads + max(step.lowest_grads, step.parts.gradients),
            a.blocks + a.masks + lowest_recompute + retained, step.lowest_autocast,
            -lowest_block_gathers(step.spec, step.sc, step.profile)) if retained else top
    top = max(top, top_cat, key=sum)
    if not step.lowest_grads:  # gradients held between micro-batches: FSDP2's shards (estimate/fsdp2.py, 6)
        return max((top, kept, second_lowest_block(step) or fsdp2_lora_middle_block(step) or top), key=sum)
    # fsdp-grad-op: the blocks above the lowest are resharded by then (estimate/grad_op.py)
    # FSDP1 FULL_SHARD: nothing below the lowest block to prefetch (estimate/reentrant_fsdp1.py lowest_block_gathers)
    below = lowest_block_gathers(step.spec, step.sc, step.profile)
    comm = held_reduce_scatter_input(step) - resharded_above_lowest(step) - below
    lowest = (step.held_grads + step.lowest_grads, a.lowest + a.masks + lowest_recompute, step.lowest_autocast, comm)
    # the dense layer 0 under the lowest MoE block (moe_kernel.dense_layer0_grads), a dense block's recompute and copies
    layer0 = (step.held_grads + step.layer0_grads, a.lowest + a.masks + (a.kind_recompute or (0, 0))[1],
              (step.kind_autocast or (0, 0))[1], comm) if step.layer0_grads else lowest
    # FSDP1's second-lowest block (its own model of the lowest where reentrant checkpointing retains inputs: ``kept``)
    second = None if retained else fsdp1_second_lowest(step, lowest)
    return max((top, lowest, layer0, kept, _lowest_moe_block(step, comm) or top,
                second or second_lowest_block(step) or fsdp2_lora_middle_block(step) or top), key=sum)


def _lowest_moe_block(step: Step, comm: int) -> tuple[int, int, int, int] | None:
    """Under LoRA, dense layers below the first MoE layer (DeepSeek's first_k_dense_replace): the lowest position is
    the dense layer 0 (moe_lora.position_kinds), but the lowest MoE block runs its backward with every gradient made
    but the dense layers' adapters, and its own kind's recompute and autocast copies, which are the larger where PEFT
    folds the adapters into the expert banks (the simulator's DeepSeek-V2-Lite LoRA, checkpointed, 512 tokens, peaks
    there in layers.1.mlp.experts' baddbmm outputs: 1.19 GiB over layer 0's dense block). The dense layers' own
    gradients, not made yet there, are counted (a few MiB of adapters). None where full fine-tuning already takes
    that block as the lowest (its layer 0 is ``layer0``) or no dense layer lies below."""
    a, kinds = step.acts, position_kinds(step.spec, step.sc) if step.acts.kind_recompute else None
    if kinds is None or kinds[1] or not step.spec.first_moe_layer:
        return None
    cast = (step.kind_autocast or (step.lowest_autocast,) * 2)[0]
    return step.held_grads + step.lowest_grads, a.lowest + a.masks + a.kind_recompute[0], cast, comm  # in its backward


def _kind_ends(step: Step) -> tuple[int, int, int]:
    """(the top block's recompute, its autocast copies, the lowest position's recompute). Where MoE and dense layers
    mix, each end recomputes and casts a block of its own layer's kind (moe_lora.position_kinds). An MoE block's
    recompute is net of what Llama 4's every-token experts free before their working set (top_freed, moe_kernel.py)."""
    a = step.acts
    kinds = position_kinds(step.spec, step.sc) if a.kind_recompute else None
    if kinds is None:
        return a.recompute - a.top_freed, step.lowest_autocast, a.recompute - a.top_freed
    casts = step.kind_autocast or (step.lowest_autocast,) * 2
    top, lowest = (0 if moe else 1 for moe in kinds)
    return a.kind_recompute[top], casts[top], a.kind_recompute[lowest]


def gradients(step: Step) -> Iterator[Contribution]:
    """Gradients: held between micro-batches, then created during backward.

    One cross-entropy: the output layer's weight gradient is made after the fp32 logits gradients
    are freed (nll_loss_backward, _log_softmax_backward_data, then MmBackward), so it belongs to the
    block phase; chunked: after every chunk's cross-entropy backward, beside the remaining chunks' logit
    gradients (:func:`_loss_backward`). The block phase sits at the top or the lowest block (:func:`_block_position`)."""
    all_grads, held, head = step.parts.gradients, step.held_grads, step.head_grad
    yield Contribution("gradients", F, held)
    yield Contribution("gradients", FA, held)
    yield Contribution("gradients", BL, held + _loss_backward(step)[1])
    yield Contribution("gradients", BB, _block_position(step)[0])
    # the language model's all made, the tower's up to its last block
    yield Contribution("gradients", BV, tower_position(step)[0])
    # FSDP full fine-tuning: the first block's whole gradients before their reduce-scatter, and the output
    # layer's while the root unit waits for the embedding's (profile.fsdp_root_gathered)
    root = head if step.profile.fsdp_root_gathered and not split_root(step) else 0
    end = end_of_backward(step)  # FSDP2: the lowest block's reduce-scatter or the last unit's (estimate/fsdp2.py)
    if end is not None and end[0]:
        yield Contribution("gradients", BE, all_grads + root + end[2])
    else:
        yield Contribution("gradients", BE, all_grads + (step.block_grads + root if step.block_grads else 0))
    tied = _tied_end_moment(step)  # FSDP: the shards, the gathered weight's three
    yield Contribution("gradients", BT, tied[0] if tied else all_grads + head + _tied_sum(step))
    # optimizer in backward: only the input embedding's gradient (its step is the last; with tied embeddings the
    # output layer's share was summed into it in autograd's input buffer)
    yield Contribution("gradients", BS, round_allocation(step.spec.embedding_params * _grad_bytes(step)))
    banks = step.profile.runs_transformers_modeling
    # FSDP1's CPU offload: the GPU shards are dropped at the end of backward, the step runs on the host's copies
    held_at_step = 0 if fsdp1_keeps_grad_shards(step.sc, step.profile) else all_grads
    yield Contribution("gradients", OPT, zero1_step_grads(step.spec, step.sc, held_at_step, banks))


def activations(step: Step) -> Iterator[Contribution]:
    """Saved tensors and autocast weight copies, consumed by backward."""
    a, kept = step.acts, step.parts.autocast_copies
    yield Contribution("activations", F, a.total + a.forward_only)
    yield Contribution("activations", FA, block_forward(step)[1] + a.forward_only)
    yield Contribution("activations", BL, a.total)
    yield Contribution("activations", BB, _block_position(step)[1])
    yield Contribution("activations", BV, tower_position(step)[1])
    # the lowest block's own tensors at the end of backward: re-created by its recompute under checkpointing, still
    # saved from the forward without it (``acts.lowest``: one block's kept tensors); never fewer without checkpointing
    lowest = a.recompute if step.sc.gradient_checkpointing is not Checkpointing.NONE else a.lowest
    # after the lowest block's backward none (its own high point is the block phase's lowest position)
    yield Contribution("activations", BE, 0 if _after_post_backward(step) else lowest)
    yield Contribution("autocast_copies", F, kept + step.autocast_forward)
    yield Contribution("autocast_copies", FA, kept + step.autocast_forward)
    yield Contribution("autocast_copies", BL, kept)
    yield Contribution("autocast_copies", BB, _block_position(step)[2])


def _loss_backward(step: Step) -> tuple[int, int]:
    """(logits_loss, gradients beyond the held ones) at the loss backward's high point: its cross-entropy stage
    (no output-weight gradient yet) or, chunked, its output projections' (estimate/loss.py projection_stage)."""
    from vramfit.estimate.step_grads import whole_head_grad

    head = step.head_grad
    if not head and step.lm_head_trainable and step.sc.method is Method.FULL:
        # gradients held between micro-batches take the sum only after the buffer has made it whole
        head = whole_head_grad(step.spec, _grad_bytes(step))
    proj_logits, proj_grads = projection_stage(step.spec, step.sc, step.profile, head)
    return max((step.loss.backward_peak, 0), (proj_logits + step.loss.kept, proj_grads), key=sum)


def logits_loss(step: Step) -> Iterator[Contribution]:
    """The loss's tensors; logits a loop keeps (``loss.kept``) stay through backward and the optimizer step."""
    kept, carried = step.loss.kept, _carried_forward(step)
    # FSDP2: forward's high point is the logits or a block's all-gathers, not both (estimate/fsdp2.py)
    at_logits = 0 if forward_at_logits(step) is False else step.loss.forward_peak
    yield Contribution("logits_loss", F, at_logits if carried is None else carried[0])
    yield Contribution("logits_loss", BL, _loss_backward(step)[0])
    held = step.loss.held
    yield Contribution("logits_loss", BB, held + kept)
    yield Contribution("logits_loss", BE, held + kept)
    yield Contribution("logits_loss", BT, held + kept)
    yield Contribution("logits_loss", OPT, held + kept)


def communication(step: Step) -> Iterator[Contribution]:
    """Data-parallel buffers; DDP buckets live from wrap to exit, ZeRO/FSDP gather buffers are freed
    after backward."""
    comm = step.parts.comm_buffers
    # FSDP2 reshards the blocks after forward and gathers them again from their pre-backward (estimate/fsdp2.py)
    at_loss = comm - blocks_freed_at_loss(step)
    staging = offload_grad_staging(step.spec, step.sc, step.profile)  # ZeRO-1/2 offload: kept from init on
    late = comm - staging if ipg_made_in_backward(step.sc) else 0  # ZeRO-1/2 buckets: from the first gradient hook on
    late_at_loss = 0 if step.profile.ds_ipg_at_backward_start else late  # DeepSpeed < 0.17.2: from backward() start
    # accelerate's FSDP2 units: the embedding resharded in forward, the tail in backward (estimate/fsdp2.py, 4)
    fwd_root, bwd_root = root_resharded(step, backward=False), root_resharded(step, backward=True)
    at_logits = at_loss + tail_gather_output(step)
    # a block's copy-out (estimate/fsdp2_forward.py); FSDP1: one block unit live in a block's forward (fsdp1_moments.py)
    block = comm + previous_gather_at_copy_out(step) - forward_unprefetched(step)
    at_logits_moment = forward_at_logits(step)
    if at_logits_moment is None:  # the generic model: forward's high point adds the logits to everything gathered
        block += tail_gather_output(step)
    ungrads = unit_grads_not_yet_made(step)  # fsdp-grad-op: the unit gradients come with backward's blocks
    yield Contribution("comm_buffers", F, (at_logits if at_logits_moment else block) - late - fwd_root - ungrads)
    # a block's forward: its gathers, no logits
    yield Contribution("comm_buffers", FA, comm - late - fwd_root - ungrads - forward_unprefetched(step))
    yield Contribution("comm_buffers", BL,
                       at_loss - late_at_loss - fwd_root + prefetched_at_loss_backward(step) - ungrads)
    yield Contribution("comm_buffers", BB, comm + _block_position(step)[3] - bwd_root - zero3_head_on_top(
        step.spec, step.sc, step.profile))
    for phase in (BV, BT):  # fsdp-grad-op: every block resharded by its post-backward (estimate/grad_op.py)
        tied = _tied_end_moment(step) if phase is BT else None
        yield Contribution("comm_buffers", phase, tied[2] if tied else comm - resharded_after_blocks(step) - bwd_root)
    # FSDP2 full fine-tuning: a unit's flat reduce-scatter input beside its whole gradients (estimate/fsdp2.py)
    fsdp2_end = end_of_backward(step)
    end = fsdp2_end[1] if fsdp2_end is not None and step.block_grads else \
        comm - resharded_above_lowest(step) - bwd_root - lowest_block_gathers(step.spec, step.sc, step.profile)
    yield Contribution("comm_buffers", BE, end)
    yield Contribution("comm_buffers", OPT, comm if step.sc.parallelism is Parallelism.DDP else staging)


def temporaries(step: Step) -> Iterator[Contribution]:
    """De-quantized weights, the block backward working set, the optimizer step's temporaries; ZeRO-3's host
    partition copies (``step.fetch_copy``): the output layer's is made when it is fetched at the end of forward,
    before the logits exist, so forward's high point is the larger of the two moments."""
    block_copy, at_block, carried = step.fetch_copy[1], _at_block(step), _carried_forward(step)
    yield Contribution("temporaries", F, _forward_temporaries(step, at_block) if carried is None else carried[1])
    yield Contribution("temporaries", FA, block_forward(step)[0])
    block_step, end_step = in_backward_steps(step.spec, step.sc)  # optimizer in backward: torchao's step temporaries
    norms = norm_transients(step)  # ZeRO-1/2 offload: the float64 norm copy of a reduced gradient
    # a checkpointed block's recompute forms its DoRA weight norms again, before its own backward's working set
    recompute_dora = step.dora_recompute if step.sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) \
        else 0  # selective recomputes the attention core only
    # none where the block phase's moment is the end of a block's backward (estimate/fsdp1_moments.py BlockEnd)
    working = 0 if getattr(_block_position(step), "working_set_freed", False) else \
        max(step.block_transient + step.dequant, recompute_dora)
    yield Contribution("temporaries", BB, working + block_copy + block_step + norms[BB])
    yield Contribution("temporaries", BV, tower_backward_transient(step.spec, step.sc, step.profile)
                       + embeds_grad_pending(step.spec, step.sc, step.profile))
    yield Contribution("temporaries", BE, 0 if _after_post_backward(step) else step.block_transient)
    yield Contribution("temporaries", BS, end_step)
    yield Contribution("temporaries", OPT, step.opt_temp)
    # tied embeddings: the shared weight's gradient is complete, and reduced, at the very end of backward; under
    # FSDP its whole gradients there (estimate/fsdp2.py tied_end, estimate/fsdp1_moments.py fsdp1_tied_end)
    tied = _tied_end_moment(step)
    yield Contribution("temporaries", BT, norms[BT] + (tied[1] if tied else 0))


def framework_buffers(step: Step) -> Iterator[Contribution]:
    """Buffers a framework keeps beside the model state from the first step on: the per-layer RoPE cos/sin caches of
    Unsloth 2024.12 (:func:`vramfit.estimate.unsloth.rope_cache_bytes`) and of transformers 4
    (:func:`vramfit.estimate.rope_v4.rope_cache_v4_bytes`)."""
    from vramfit.estimate.rope_v4 import rope_cache_v4_bytes
    from vramfit.estimate.unsloth import rope_cache_bytes

    rope = rope_cache_bytes(step.spec, step.sc, step.profile) + rope_cache_v4_bytes(step.spec, step.sc, step.profile)
    for phase in _ALL:
        yield Contribution("rope_cache", phase, rope)


def _forward_temporaries(step: Step, at_block: int) -> int:
    """Forward's temporaries at its high point: under FSDP the moment :func:`vramfit.estimate.fsdp2.forward_at_logits`
    picks. Elsewhere ZeRO-3's fetch-copy excess (:func:`_at_block`, made beside the logits) and the larger of the
    logits moment and a block's: a block's de-quantized weight is freed with its matmul, so at the logits only the
    output layer's own is alive, where the framework quantizes it (``profile.qlora_quantizes_lm_head``, lit-gpt: then
    the largest), and a block's moment comes before the logits exist. The simulator's forward peaks at the loss
    without a block's copy (Llama-2-7B QLoRA at 1 x 2,048: 89 MiB; a tiny Qwen3-VL QLoRA: 5.7 MiB, +3.7 % at that
    moment with it)."""
    at_logits = forward_at_logits(step)
    if at_logits is not None:
        return 0 if at_logits else at_block
    head = step.dequant if step.profile.qlora_quantizes_lm_head else 0
    return at_block - step.dequant + max(head, step.dequant - step.loss.forward_peak)


def _carried_forward(step: Step) -> tuple[int, int, int] | None:
    """Forward's high point with the logits the loop carries (:func:`vramfit.estimate.retained_graph.
    carried_logits_forward`): (logits_loss, temporaries, carried logits), or None."""
    from vramfit.estimate.retained_graph import carried_logits_forward

    return carried_logits_forward(step, _at_block(step))


def _at_block(step: Step) -> int:
    """A block's forward temporaries: its de-quantized weight, or ZeRO-3's host copy of the output layer where that is
    larger than the de-quantized weight and the logits together (``step.fetch_copy``)."""
    return step.dequant + max(0, step.fetch_copy[0] - step.dequant - step.loss.forward_peak)


def block_forward(step: Step) -> tuple[int, int]:
    """(working set, kept activations) of the top block's forward high point (``FORWARD_ATTENTION``): its eager fp32
    softmax (block_extras.forward_softmax_moment, a 4-bit layer's de-quantized weight beside it) or its widest DoRA
    layer's weight norm (estimate/dora.py) with every block's kept tensors, whichever is higher. Not at the logits:
    no DoRA layer runs there (the simulator's forward peak at the loss holds none of its tensors)."""
    eager = (step.eager_forward[0] + step.dequant, step.eager_forward[1]) if step.eager_forward[0] else (0, 0)
    dora = (step.dora_forward, step.acts.blocks + step.acts.masks) if step.dora_forward else (0, 0)
    return max(eager, dora, key=sum)


def previous_step(step: Step) -> Iterator[Contribution]:
    """What the loop carries from the previous micro-batch into this one's forward (``profile.loop_carry``), alive
    until the forward returns: the previous 4-bit matmul inputs (:func:`vramfit.estimate.retained_graph.
    previous_step_inputs`), a kept output (OUTPUTS) or the loop's fp32 logits (LOGITS): the forward phases only."""
    from vramfit.estimate.retained_graph import carried_logits, previous_step_inputs

    carried = _carried_forward(step)
    for phase in (F, FA):
        yield Contribution("previous_step_inputs", phase, previous_step_inputs(step))
        if step.profile.loop_carry is LoopCarry.OUTPUTS:
            yield Contribution("logits_loss", phase, step.loss.kept)
        if carried is not None:  # in a block's forward (FA) too; at forward's high point only where it is
            yield Contribution("logits_loss", phase, carried[2] if phase is F else carried_logits(step))


def load_high_point(step: Step) -> Iterator[Contribution]:
    """The load phase: the MXFP4 conversion (in from_pretrained), ZeRO-1/2's flatten (in the engine's initialisation,
    after the model has loaded) and a forced-float32 cast (after from_pretrained) happen one after the other, so the
    highest counts."""
    loads = [list(load_phase(step)), list(flatten_load_phase(step)), list(cast_load_phase(step))]
    yield from max(loads, key=lambda cs: sum(c.bytes for c in cs))


CONTRIBUTORS: tuple[Contributor, ...] = (
    model_state, gradients, activations, logits_loss, communication, temporaries, framework_buffers, previous_step,
    load_high_point, evaluation_pass)


def phase_breakdowns(step: Step, contributors: Iterable[Contributor] = CONTRIBUTORS) -> tuple[PhaseBreakdown, ...]:
    """Each phase that happens in ``step``, with its non-zero contributions summed per component."""
    active = [phase for phase, happens in PHASE_RULES.items() if happens(step)]
    sums: dict[StepPhase, dict[str, int]] = {phase: {} for phase in active}
    for contributor in contributors:
        for c in contributor(step):
            if c.phase in sums and c.bytes:
                sums[c.phase][c.name] = sums[c.phase].get(c.name, 0) + c.bytes
    return tuple(PhaseBreakdown(phase, tuple(sums[phase].items())) for phase in active)
