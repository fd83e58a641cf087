"""DeepSpeed ZeRO-2's optimizer step replayed through the caching allocator: the segments its flat partition-sized
tensors leave reserved beyond the step's allocated bytes (moved out of estimate/allocator.py)."""

from __future__ import annotations

from vramfit.estimate.allocator import AllocatorConf, round_allocation, transient_reserved, zero12_norm_piece
from vramfit.estimate.constants import K_ROUND_LARGE


def zero2_step_reserved(r, step_allocated: int, loss_events: list[int], conf: AllocatorConf | None = None) -> int:
    """Bytes reserved beyond ``step_allocated`` (the optimizer-step phase's allocated bytes) at DeepSpeed ZeRO-2's
    step without optimizer offload: the segments the micro-batch's loss left cached (``loss_events``,
    :func:`vramfit.estimate.transients.step_transients`) and those the step's flat partition-sized tensors opened beyond their own live bytes.
    Each of those is larger than the loss's cached blocks at the usual micro-batch, so it opens a segment of its own,
    and the freed 16-bit ones cannot serve the fp32 ones; 0 when ZeRO-2 does not run this step.

    DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py (0.19.8 the same without pre-flattened gradients):
    ``copy_grads_in_partition`` puts this GPU's 16-bit gradients in one ``grads_in_partition`` buffer in backward
    (``contiguous_gradients``, the default); ``step``: ``self.flatten(self.averaged_gradients[i])`` (16-bit),
    ``.to(fp32)``, the flat copy dropped, ``free_grad_in_param_list(self.params_in_partition[i])`` and
    ``averaged_gradients[i] = None`` (the buffer goes), ``self._optimizer_step(i)`` (foreach AdamW:
    ``torch._foreach_sqrt`` copies the fp32 second moment, :func:`vramfit.estimate.step.ds_foreach_step`), then
    ``single_partition_of_fp32_groups[i].grad = None``. Before the flatten, full fine-tuning's gradient norm takes a
    float64 copy of each gradient in turn (``scaled_global_norm``, :func:`zero12_norm_piece`): the largest opens a
    segment the smaller ones split. One param group's partition stands for all: the Trainer's no-decay group
    (biases, norms) is small. ``vramfit simulate`` (DeepSpeed 0.19.8, Qwen2.5-0.5B, 2 GPUs, full depth) opens the
    same float64 (1.01 GiB, the whole embedding on rank 0) and foreach sqrt (0.92 GiB) segments.

    Not replayed: DeepSpeed 0.19's flatten on the GPU (estimate/ds_load.py) leaves the 16-bit parameters the engine
    moved there one by one cached, up to the whole 16-bit model, which ``max_memory_reserved`` on a roomy card counts
    (the simulator: Qwen2.5-3B +5.75 GiB). A card without the room gets them back: a failed ``cudaMalloc`` releases
    the cached blocks and retries (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``malloc``:
    ``release_cached_blocks``), so counting them would refuse runs that fit; the estimate has one figure per card
    class (the planner's premise, plan/evaluate.py ``class_shifts``)."""
    from vramfit.estimate.framework import OptimizerImpl
    from vramfit.scenario import Method, Offload, Optimizer, Parallelism, Precision

    sc = r.sc
    if (sc.parallelism is not Parallelism.ZERO2 or sc.offload is not Offload.NONE or sc.precision is Precision.FP32
            or sc.num_gpus < 2 or not r.parts.num_trainable):
        return 0
    group = -(-r.parts.num_trainable // sc.num_gpus)
    norm = 8 * zero12_norm_piece(r.spec, group) if sc.method is Method.FULL else 0
    foreach = sc.optimizer is Optimizer.ADAMW and r.profile.torch_optimizer_impl is OptimizerImpl.FOREACH
    events, windows = _zero2_events(loss_events, group, sc.precision.compute_bytes, norm, foreach)
    _, reserved = transient_reserved(events, conf)
    sizes, live, at_step = [], 0, 0
    for i, ev in enumerate(events):  # the live bytes at the step's moments (master and states included)
        if ev >= 0:
            sizes.append(round_allocation(ev))
            live += sizes[-1]
        else:
            live -= sizes[-ev - 1]
        if any(a <= i < b for a, b in windows):
            at_step = max(at_step, live)
    return max(0, reserved - at_step) // K_ROUND_LARGE.value * K_ROUND_LARGE.value


def _zero2_events(loss_events: list[int], group: int, c: int, norm: int, foreach: bool) -> tuple[list[int], list]:
    """Model load, then two steps (the first makes the optimizer states), as :func:`transient_reserved` events, and
    the index windows of the steps. Load (DeepSpeed v0.16.2 stage_1_and_2.py ``__init__``): the fp32 master partition
    is ``bit16_partition.to(device).clone().float()`` (the 16-bit clone goes), and ``initialize_optimizer_states``
    makes a zero fp32 gradient partition and drops it (``group.grad = None`` without offload): both segments stay
    cached for the steps to reuse. Each step: the loss's tensors, the 16-bit gradient buffer, the norm's float64
    copy, the flat 16-bit copy and its fp32 cast, both 16-bit ones dropped, the states (first step:
    torch/optim/adamw.py ``_init_group`` ``zeros_like`` twice), foreach AdamW's sqrt copy, the fp32 gradient dropped.
    """
    ev: list[int] = []
    count = 0

    def alloc(n: int) -> int:
        nonlocal count
        ev.append(n)
        count += 1
        return count

    clone = alloc(c * group)
    alloc(4 * group)  # the fp32 master partition, kept
    ev.append(-clone)
    ev.append(-alloc(4 * group))  # the zero gradient of initialize_optimizer_states, made and dropped
    windows = []
    for first in (True, False):
        base = count
        ev.extend(e if e >= 0 else e - base for e in loss_events)
        count += sum(1 for e in loss_events if e >= 0)
        start = len(ev)
        grads = alloc(c * group)
        ev.append(-alloc(norm))
        flat, fp32 = alloc(c * group), alloc(4 * group)
        ev.extend((-flat, -grads))
        if first:
            alloc(4 * group)
            alloc(4 * group)
        if foreach:
            ev.append(-alloc(4 * group))
        ev.append(-fp32)
        windows.append((start, len(ev)))
    return ev, windows
