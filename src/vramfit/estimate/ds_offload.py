"""ZeRO-1/2 with the optimizer offloaded: what the GPU still holds for the host's step.

DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py with ``offload_optimizer``: the fp32 partition, its gradient and
the optimizer states live on the host (``self.device = 'cpu'``); the GPU keeps a staging buffer for the reduced
gradients (:func:`offload_grad_staging`) and, at the accumulation boundary, takes each parameter's gradient norm
in float64 as its gradient is copied out (:func:`offload_norm_transient`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import ZERO_FAMILY, Checkpointing, Method, Offload, Parallelism
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.deepspeed import resolve, zero3_largest
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.state import shard
from vramfit.estimate.zero3_reserved import zero3_reserved_floor
from vramfit.estimate.zero12_partition import adapter_order, module_order, rank0_outside, rank0_partition

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.estimate.params import Adapter
    from vramfit.estimate.step import Step
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario


def host_optimizer(sc: Scenario):
    """The optimizer that steps on the host under ZeRO's optimizer offload. The HF Trainer hands accelerate its own
    optimizer, which accelerate swaps for DeepSpeed's CPU one with the offload on (huggingface/accelerate@16cb6eb
    accelerator.py l. 2365-2374 -> utils/deepspeed.py ``map_pytorch_optim_to_deepspeed``: DeepSpeedCPUAdam for any
    optimizer but a 32-bit Adagrad or bitsandbytes Lion, which become DeepSpeedCPUAdagrad / DeepSpeedCPULion);
    DeepSpeed itself refuses any other client optimizer there (deepspeedai/DeepSpeed@edaa722 runtime/engine.py
    ``_configure_optimizer``). So fp32 Adam states whatever 8-bit, paged or SGD optimizer the scenario names; the
    scenario's elsewhere."""
    from vramfit.choices import Optimizer

    if sc.offload is Offload.NONE or sc.parallelism not in ZERO_FAMILY or sc.optimizer in (Optimizer.ADAMW,
                                                                                              Optimizer.LION):
        return sc.optimizer
    return Optimizer.ADAMW




def host_optimizer_note(sc: Scenario) -> list[str]:
    """The assumption line where :func:`host_optimizer` replaces the scenario's optimizer."""
    if host_optimizer(sc) is sc.optimizer:
        return []
    return [f"Optimizer offload under ZeRO steps with DeepSpeed's CPU Adam: accelerate replaces the Trainer's "
            f"{sc.optimizer.value} with it (map_pytorch_optim_to_deepspeed), so the host keeps fp32 Adam states."]


def offloads_zero12(sc: Scenario) -> bool:
    return sc.offload is not Offload.NONE and sc.parallelism in (Parallelism.ZERO1, Parallelism.ZERO2)


def offload_grad_staging(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """ZeRO-1/2 with optimizer offload: a GPU buffer of the largest trainable parameter's size in the 16-bit (engine)
    dtype, allocated at init and kept, through which each reduced gradient is copied to the host fp32 gradient
    partition (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py __init__: ``self.temp_grad_buffer_for_gpu_offload =
    torch.zeros(largest_param_numel, device=get_accelerator().current_device_name(), dtype=self.dtype)``, the
    largest over ``self.bit16_groups``, the trainable parameters); bytes. Full fine-tuning: the output layer or
    embedding, or the largest block linear; adapters: a LoRA matrix, rank x the widest linear side."""
    if not offloads_zero12(sc):
        return 0
    if sc.method is Method.FULL:
        return zero3_largest(spec, sc, profile)[0]
    widest = max(max(lin.in_features, lin.out_features) for lin in spec.block_linears)
    return sc.lora_rank * widest * sc.precision.compute_bytes


def offload_norm_transient(sc: Scenario, param_numel: int, trainable_numel: int) -> int:
    """At the accumulation boundary each reduced gradient's norm is taken in float64 from this rank's slice of it
    before the copy to the host (stage_1_and_2.py copy_grads_in_partition -> set_norm_for_param_grad_in_gpu:
    ``accumulated_grad.view(-1).narrow(0, start, num_elements).data.to(get_norm_dtype()).norm(2)``, get_norm_dtype
    float64 where the device has it, zero/utils.py): 8 bytes per element of the parameter's part of the partition,
    freed after the norm; bytes. ``param_numel``: the parameter whose gradient is reduced then."""
    if not offloads_zero12(sc) or not param_numel:
        return 0
    return 8 * min(param_numel, -(-trainable_numel // sc.num_gpus))


def offload_host_gradients(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, fp32_partition: int,
                           grad16_partition: int) -> int:
    """Host bytes of the gradient-side buffers DeepSpeed keeps (pinned) with the optimizer offloaded, beyond the fp32
    master partition and the optimizer states; ``fp32_partition``: this rank's fp32 master partition, bytes;
    ``grad16_partition``: this rank's share of the 16-bit gradients, bytes.

    DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py (ZeRO-1/2): ``initialize_optimizer_states`` gives the fp32
    partition a gradient of its size on ``self.device`` ('cpu', pinned); ``__init__`` keeps a 16-bit twin of the
    partition (``param_buffer_of_bit16_for_cpu_offload_groups``, ``torch.full(weights_partition.shape, dtype=
    temp_dtype)``) and a host staging buffer of the largest trainable parameter (``temp_grad_buffer_for_cpu_offload =
    torch.zeros(largest_param_numel, device=self.device, dtype=self.dtype)``, the size of the GPU one:
    :func:`offload_grad_staging`); ZeRO-2 with gradient accumulation also accumulates each of its parameters'
    gradients on the host between micro-batches (``async_accumulate_grad_in_cpu_via_gpu``:
    ``accumulated_grads_in_cpu[param_id] = torch.zeros(param.numel(), dtype=param.dtype, device=self.device)``, from
    the second micro-batch; ZeRO-1 reduces only at the boundary, runtime/engine.py ``allreduce_gradients``, so its
    gradients accumulate on the GPU instead: :func:`zero1_accumulated_grads`). stage3.py (ZeRO-3): the fp32 sub-group
    gradients (``subgroup_gradient_buffer`` on ``self.device``, pinned) and the 16-bit gradient partitions
    (``grad_partitions_flat_buffer`` on ``self.device``, pinned). The simulator's engine on a tiny Llama (2 ranks, 18
    bytes per partition element plus ZeRO-1/2's staging) books them all on its host."""
    if sc.offload is Offload.NONE or sc.parallelism not in ZERO_FAMILY:
        return 0
    host = fp32_partition + grad16_partition
    if sc.parallelism is not Parallelism.ZERO3:
        host += offload_grad_staging(spec, sc, profile)
    if sc.parallelism is Parallelism.ZERO2 and sc.grad_accum > 1:
        host += grad16_partition
    return host


def zero1_accumulated_grads(sc: Scenario, num_trainable: int) -> int:
    """ZeRO-1 with the optimizer offloaded and gradient accumulation: every trainable parameter's 16-bit gradient stays
    on the GPU between micro-batches, bytes. The engine reduces ZeRO-1's gradients only at the accumulation boundary
    (DeepSpeed 0.19.8 runtime/engine.py ``allreduce_gradients``: "Communicate only at gradient accumulation
    boundaries"; stage_1_and_2.py ``reduce_ready_partitions_and_remove_grads`` runs only ``if
    self.partition_gradients or self.is_gradient_accumulation_boundary()``), so autograd adds each micro-batch into
    ``param.grad`` on the GPU, offload or not; the host copies happen in the boundary micro-batch's backward."""
    if sc.parallelism is not Parallelism.ZERO1 or sc.offload is Offload.NONE or sc.grad_accum < 2:
        return 0
    return sc.precision.compute_bytes * num_trainable


def zero1_gpu_grads(spec: ModelSpec, sc: Scenario, all_grads: int, adapters: list[Adapter], banks: bool) -> int:
    """16-bit gradient bytes ZeRO-1 with the optimizer offloaded keeps on the GPU until the end of backward (0 for
    every other offloaded case: their gradients leave through the staging buffer as they are reduced); ``all_grads``:
    the whole model's; ``adapters``: LoRA's (none for full fine-tuning); ``banks``: as
    :func:`vramfit.estimate.zero12_partition.module_order`. ZeRO-1 does not partition gradients: at the
    boundary it copies its own partition's out (stage_1_and_2.py ``reduce_ipg_grads``, "zero stage 1 - partition only
    optimizer state": only ``copy_grads_in_partition`` for ``is_param_in_current_partition``) and drops nothing else
    until the epilogue clears every ``param.grad`` (``_clear_param_grad_only``); the step finds none
    (:func:`vramfit.estimate.zero12_partition.zero1_step_grads`). Of the parameters outside its partition
    (``params_not_in_partition``, :func:`vramfit.estimate.zero12_partition.rank0_outside`) only those larger than
    ``reduce_bucket_size`` keep a tensor of their own, each its own allocation: with ``contiguous_gradients`` each
    smaller gradient is copied into the IPG bucket and ``param.grad`` pointed there
    (``reduce_independent_p_g_buckets_and_remove_grads``: ``new_grad_tensor.copy_(...)``, ``grad_reduc.data =
    new_grad_tensor.data.view_as(grad_reduc)``, the original freed; ``if param.numel() > self.reduce_bucket_size``
    keeps it: DeepSpeed v0.16.2 l. 951-957, v0.18.6 l. 1071-1079, 0.19.8 l. 1443-1456), tensor by tensor, LoRA's
    adapters as the base model's parameters (:func:`vramfit.estimate.zero12_partition.adapter_order`). The engine
    on Qwen2.5-0.5B (2 GPUs, full depth, bucket 896 x 896) holds 427 MB of them at the end of backward: the upper
    layers' MLP weights, none of their attention weights."""
    if sc.parallelism is not Parallelism.ZERO1 or sc.offload is Offload.NONE:
        return 0
    z = resolve(sc.deepspeed_config, spec.hidden_size, 1)
    if not z.contiguous_gradients:
        return all_grads - shard(all_grads, sc.num_gpus)  # every gradient outside, in its own tensor
    order = module_order(spec, banks) if sc.method is Method.FULL else adapter_order(adapters, sc.lora_rank,
                                                                               spec.num_hidden_layers)
    return sum(round_allocation(sc.precision.compute_bytes * n) for n in rank0_outside(order, sc.num_gpus)
               if n > z.reduce_bucket_size)


def norm_transients(step: Step) -> dict[StepPhase, int]:
    """The float64 norm copy (:func:`offload_norm_transient`) each backward phase holds on rank 0, bytes: a block's
    backward the largest slice rank 0's partition holds of a parameter reduced before the end of backward, the end of
    backward the embedding's (first in the flat buffer, so in rank 0's partition; a tied one's gradient is complete,
    and reduced, only then). ``copy_grads_in_partition`` -> ``set_norm_for_param_grad_in_gpu`` copies only this
    rank's slice (``narrow(0, start, num_elements)``, DeepSpeed 0.19.8 stage_1_and_2.py): an untied output layer, last
    in the buffer, is in the last rank's partition, not rank 0's (:func:`rank0_partition`). The engine on
    Llama-3.1-8B (4 GPUs, seq 2048, no checkpointing, full depth) peaks at the loss's backward, 33,512,819,712 B; with
    the output layer's 525M-element copy (4.2 GB) counted in the blocks' backward the estimate was +6.8 % (ZeRO-2) /
    +7.7 % (ZeRO-1)."""
    sc, spec, n = step.sc, step.spec, step.parts.num_trainable
    if sc.method is not Method.FULL or not offloads_zero12(sc):
        return {StepPhase.BACKWARD_BLOCK: 0, StepPhase.BACKWARD_END_TIED: 0}
    order = module_order(spec, step.profile.runs_transformers_modeling)
    slices = rank0_partition(order, sc.num_gpus)[1]  # backward order: the embedding's last
    return {StepPhase.BACKWARD_BLOCK: offload_norm_transient(sc, max(slices[:-1], default=0), n),
            StepPhase.BACKWARD_END_TIED: offload_norm_transient(sc, slices[-1] if slices else 0, n)}


def offload_reserved(r: Step, peak: str, reserved: int, required: bool = False) -> int:
    """The reserved peak of ZeRO-1/2 full fine-tuning with the optimizer offloaded, given ``reserved``, the figure
    of the step's allocated peak (``peak``: its phase, an evaluation pass apart) plus the usual slack
    (estimate/reserved.py): the step replayed through the allocator per stream (:func:`offload_step_replay`), the
    default stream's segments (the load's cached ones and those the micro-batch's loss and output-layer gradients open
    beside them) and those its per-parameter float64 norm copies open on the reduction stream.

    At the accumulation boundary ``reduce_ipg_grads`` copies each reduced gradient of this rank's partition out under
    ``get_accelerator().stream(self.reduction_stream)`` when ``overlap_comm`` is set (DeepSpeed v0.16.2
    runtime/zero/stage_1_and_2.py l. 1375-1408, v0.18.6 l. 1529-1561, 0.19.8 l. 2239-2274): ``copy_grads_in_partition``
    -> ``set_norm_for_param_grad_in_gpu`` (``accumulated_grad.view(-1).narrow(0, start, num_elements).data`` to
    float64 then ``.norm(2)``: ``.double()`` in v0.16.2/v0.18.6, ``.to(get_norm_dtype())`` in 0.19.8) and
    ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` (the slice cast to the fp32 master dtype on the GPU,
    ``src_tensor.float()`` / ``.to(self.master_weights_and_grads_dtype)``, then copied to the host), one parameter
    after another in the order backward reduces them. Those blocks are the reduction stream's
    (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp: a block is reused only on its own stream), so each
    copy larger than every earlier one opens a segment of its own beside the default stream's, which keep the load's
    cached segments (no ``empty_cache`` after it). Peak reserved: the default stream's (the larger of ``reserved``
    without the norm copy counted at the allocated peak and the replay's default-stream segments) plus the reduction
    stream's. Without ``overlap_comm`` the copies share the default stream's pool: the replay's own peak is the floor.
    One GPU runs the same path: nothing in ``reduce_ipg_grads`` looks at the world size (0.19.8 l. 2239-2274: the
    stream is chosen by ``overlap_comm`` alone, ``copy_grads_in_partition`` runs for every parameter of the one
    partition); `vramfit simulate --full-depth` of Qwen2.5-0.5B (bf16, seq 256, ZeRO-2, 1 GPU) reserves
    4,271,898,624 B.
    ``required``: unchanged (the load's freed segments and the smaller copies' are wholly free at the peak, given
    back by ``release_cached_blocks``). `vramfit simulate` of Qwen2.5-0.5B (bf16, seq 256, 2 GPUs, full depth)
    reserves 4,030 MiB under ZeRO-1 and ZeRO-2 alike: on the default stream the load's 2,408 (the originals' 1,252,
    the flat copy's 944, the partition clone's 472), the loss backward's fp32 log-softmax gradient 150 and the tied
    embedding's second gradient 260 (the output layer's, made in the loss's backward, holds the clone's segment), the
    activations' small-pool segments 114; on the reduction stream 34 + 20 + 2 + 1,040 (the first 4,358,144-element
    slice's float64, its fp32 cast's, then the embedding's)."""
    if required:
        return reserved
    if zero3 := zero3_reserved_floor(r):  # ZeRO-3's load, micro-batch and step (estimate/zero3_reserved.py)
        return max(reserved, zero3)
    if not offloads_zero12(r.sc) or r.sc.method is not Method.FULL:
        return reserved
    _, default, total, side = offload_step_replay(r)
    if not side:
        return max(reserved, total)
    norm = {p.value: n for p, n in norm_transients(r).items()}.get(peak, 0)  # a stage's phase: none
    return max(reserved, max(reserved - norm, default) + total - default)


def offload_step_replay(r: Step) -> tuple[int, int, int, bool]:
    """(bytes reserved after the load, the default stream's peak reserved over the step, the peak reserved of both
    streams, whether the norm copies are on the reduction stream) of ZeRO-1/2 full fine-tuning with the optimizer
    offloaded, replayed through :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel` (each segment stays with the
    stream that opened it; none is returned). Load (DeepSpeed 0.19.8 stage_1_and_2.py ``__init__``): the flatten
    (estimate/ds_load.py ``flatten_events``; flattened on the host, releases before v0.18.7, the flat buffer comes
    to the GPU whole: ``flattened_buffer.to(...)``), rank 0's 16-bit partition cloned on the GPU on its way to the
    host (``.detach().clone().to(device=self.device, ...)``, freed), the GPU staging buffer
    (:func:`offload_grad_staging`, kept). The boundary micro-batch (:func:`_backward_events`): the loss's tensors,
    the output layer's gradient, rank 0's partition slices (:func:`rank0_partition`) in backward order, each one's
    float64 copy (8 bytes an element) made and freed, then its fp32 cast (4). Not replayed: the saved activations (on
    the default stream, carved from the originals' freed segments or the small pool: the generic slack's)."""
    from vramfit.estimate.ds_load import flat_copy, flatten_events
    from vramfit.estimate.zero2_step import partition_grads_on_side_stream
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    sc = r.sc
    side = partition_grads_on_side_stream(r)
    model, kept, opened = CachingAllocatorModel(r.profile.alloc_conf), [], [0, 0]
    for ev in flatten_events(r, by_module=True) or [flat_copy(r)]:
        if ev >= 0:
            kept.append(model.malloc(ev))
        else:
            model.free(kept[-ev - 1])
    model.free(model.malloc(sc.precision.compute_bytes * shard(r.parts.num_trainable, sc.num_gpus)))
    model.malloc(offload_grad_staging(r.spec, sc, r.profile))
    load = opened[0] = model.stats.reserved
    blocks: list = []
    for nbytes, stream in _backward_events(r, side):
        if nbytes >= 0:
            before = model.stats.reserved
            blocks.append(model.malloc(nbytes, stream))
            opened[stream] += model.stats.reserved - before
        else:
            model.free(blocks[-nbytes - 1])
    return load, opened[0], model.stats.peak_reserved, side


def _saved_activations(r: Step) -> list[int]:
    """Each block's saved tensors in forward order, bytes (estimate/saved.py ``Saved``: one entry a tensor); none under
    checkpointing, whose few kept inputs the usual slack covers. Those of 1 MiB or less go to the small pool's 2 MiB
    segments, which no large-pool cached block can serve (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp
    ``get_pool``: kSmallSize); the larger split the segments the load left cached. The engine's trace (DeepSpeed 0.19.8,
    Qwen2.5-0.5B bf16 seq 256, 2 GPUs, full depth) opens 57 small-pool segments (114 MiB) in the first forward and no
    large-pool one for them; this replay 108 MiB."""
    if r.sc.gradient_checkpointing is not Checkpointing.NONE:
        return []
    return [n for _ in range(r.spec.num_hidden_layers) for n in r.saved.items.values() if n > 0]


def _backward_events(r: Step, side: bool) -> list[tuple[int, int]]:
    """The boundary micro-batch's big tensors after the load as (bytes, stream) allocations and (-k, 0) frees of the
    ``k``-th (:func:`offload_step_replay`). The loss's tensors (estimate/transients.py ``step_transients``); then its
    backward's output-layer weight gradient (``mm`` of the logits' gradient and the final hidden states, 16-bit): a
    tied weight's stays in autograd's input buffer until the embedding's own gradient (``embedding_dense_backward``)
    meets it at the end of backward and the two are summed (autograd accumulates a leaf's gradients before its
    ``AccumulateGrad`` hook runs, torch/csrc/autograd/input_buffer.cpp ``InputBuffer::add``), an untied one leaves
    with its reduction; the block slices' norm copies and casts (``set_norm_for_param_grad_in_gpu``, ``src_tensor.to
    (fp32)``); at the end the embedding's gradient and its slice's copies. The engine's trace (`vramfit simulate
    --full-depth`, DeepSpeed 0.19.8, Qwen2.5-0.5B, 2 GPUs) makes them in this order: the tied weight's output-layer
    gradient in the partition clone's cached segment, its embedding gradient in a segment of its own."""
    from vramfit.estimate.transients import step_transients

    sc, spec = r.sc, r.spec
    ev: list[tuple[int, int]] = []
    count = 0

    def alloc(n: int, stream: int = 0) -> int:
        nonlocal count
        ev.append((n, stream))
        count += 1
        return count

    acts = [alloc(n) for n in _saved_activations(r)]
    base = count
    for e in step_transients(r):
        if e < 0:
            ev.append((e - base, 0))
        else:
            alloc(e)
    c = sc.precision.compute_bytes
    head = alloc(c * (spec.lm_head_params or spec.embedding_params))
    if spec.lm_head_params:
        ev.append((-head, 0))
    ev.extend((-k, 0) for k in reversed(acts))  # backward frees each block's saved tensors, the top block's first
    order = module_order(spec, r.profile.runs_transformers_modeling)
    slices = rank0_partition(order, sc.num_gpus)[1]  # backward order: the embedding's last
    stream = 1 if side else 0
    for i, piece in enumerate(slices):
        if i == len(slices) - 1:  # the embedding's gradient, summed with the tied output layer's
            grad = alloc(c * spec.embedding_params)
            if not spec.lm_head_params:  # merged in place into the output layer's (sim/inplace.py), then copied
                ev.append((-grad, 0))
                alloc(c * spec.embedding_params)
                ev.append((-head, 0))
        for width in (8, 4):
            ev.append((-alloc(width * piece, stream), 0))
    return ev
