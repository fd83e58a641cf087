"""DeepSpeed ZeRO-2's optimizer step replayed through the caching allocator: the segments its flat partition-sized
tensors leave reserved beyond the step's allocated bytes (moved out of estimate/allocator.py)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from vramfit.estimate.allocator import AllocatorConf, coarsen, largest_weight, round_allocation
from vramfit.estimate.constants import K_ROUND_LARGE
from vramfit.estimate.state import shard
from vramfit.estimate.zero12_partition import grads_in_partition


def zero12_norm_piece(spec, partition_numel: int) -> int:
    """Elements of the largest gradient piece one GPU holds under ZeRO-1/2: they partition the flat 16-bit buffer, not
    each parameter (DeepSpeed v0.16.2 stage_1_and_2.py ``get_data_parallel_partitions``), so a parameter lies whole in
    one partition unless it straddles a boundary, and the (un)embedding, first or last in the buffer, does up to the
    partition's size. The norm takes a float64 copy of each piece (``get_grad_norm_direct``:
    ``g.data.double()``)."""
    return min(largest_weight(spec), partition_numel)


def partition_grads_on_side_stream(r) -> bool:
    """Whether ZeRO-2 makes this GPU's 16-bit gradient partition on its reduction stream: with ``overlap_comm`` and
    ``contiguous_gradients`` (the config resolved as HF does, :func:`vramfit.estimate.deepspeed.resolve`).

    DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py ``reduce_ipg_grads`` (l. 1375-1404; the same in v0.18.9 and
    0.19.8): ``if self.overlap_comm: stream = self.reduction_stream`` (a ``get_accelerator().Stream()`` on a GPU,
    l. 425), then ``with get_accelerator().stream(stream):`` ... ``self.copy_grads_in_partition(param)``, whose first
    call makes the buffer, ``self.grads_in_partition = torch.empty(int(total_size), dtype=self.dtype, ...)``
    (l. 1345). The caching allocator files a block under the stream it was allocated on and serves a request only
    from its own stream's free blocks (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp: "Once freed,
    blocks can be re-allocated on the same stream, but not on any other stream"; the model:
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`), so the segment that buffer opened stays the
    reduction stream's: freed at the step, it serves none of the step's default-stream tensors.

    With gradient accumulation each micro-batch's epilogue (``independent_gradient_partition_epilogue``
    l. 758-801) keeps ``averaged_gradients[i]`` as views of that buffer (``get_flat_partition(...,
    return_tensor_list=True)``, then ``_release_ipg_buffers``: ``self.grads_in_partition = None``), so the next
    micro-batch's first copy makes a second buffer beside it, adds it in (``accumulated_grad.add_``) and drops it
    (0.19.8: ``all_grad_tensors`` the same): two partition-sized buffers on that stream."""
    from vramfit.estimate.deepspeed import resolve
    from vramfit.scenario import Parallelism

    if r.sc.parallelism not in (Parallelism.ZERO1, Parallelism.ZERO2):
        return False
    # ZeRO-1 copies its partition's gradients in the same ``with stream`` block (0.19.8 reduce_ipg_grads: "zero stage 1
    # - partition only optimizer state": ``copy_grads_in_partition``), once per step: it reduces only at the boundary
    z = resolve(r.sc.deepspeed_config, r.spec.hidden_size, 2 if r.sc.parallelism is Parallelism.ZERO2 else 1)
    return z.overlap_comm and z.contiguous_gradients


def ipg_reduction(r) -> tuple[tuple[int, ...], int, bool]:
    """(the IPG bucket buffers, bytes each; the largest flat copy a reduction of them makes, bytes; whether that copy
    is made on the reduction stream) of ZeRO-1/2 on this GPU, sized from the DeepSpeed config
    (:func:`vramfit.estimate.deepspeed.resolve`: ``reduce_bucket_size``, ``overlap_comm``).

    The buckets (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py ``setup_buckets``: ``buf_0``, and ``buf_1`` with
    ``overlap_comm``, ``torch.empty(int(self.reduce_bucket_size), dtype=self._gradient_reduction_buffer_dtype())``,
    :func:`vramfit.estimate.deepspeed.ipg_bytes`) hold each gradient as backward makes it; a reduction of a bucket
    that spans a partition's edge flattens its contents (:func:`vramfit.estimate.zero12_partition.ipg_flats`) in
    the buckets' dtype, under
    ``with get_accelerator().stream(stream)`` in ``average_tensor``, ``stream = self.reduction_stream`` if
    ``self.overlap_comm`` else the current one. Without ``overlap_comm`` (DeepSpeed's default for stages 1 and 2)
    and the default 5e8-element bucket, a model under 500M parameters is reduced in one flat copy of every
    gradient at the end of backward: `vramfit simulate --full-depth` of Qwen2.5-0.5B (2 GPUs) makes a 988,065,792-byte
    ``cat`` beside the 1e9-byte bucket. LoRA's adapters are far smaller than a bucket: it fills to its size (or
    takes them all)."""
    from vramfit.estimate.deepspeed import ipg_bytes, resolve
    from vramfit.estimate.zero12_partition import ipg_flats, module_order, reduction_order
    from vramfit.scenario import Method, Parallelism, Precision

    sc = r.sc
    stage = 2 if sc.parallelism is Parallelism.ZERO2 else 1
    z = resolve(sc.deepspeed_config, r.spec.hidden_size, stage)
    width = 4 if sc.precision is Precision.FP32 else 2  # the engine's dtype, as estimate/core.py _zero_buffers
    if sc.method is Method.FULL:
        banks = r.profile.runs_transformers_modeling
        order = reduction_order(module_order(r.spec, banks), sc.num_gpus, stage == 2 or z.overlap_comm)
        flat = max(ipg_flats(order, z.reduce_bucket_size), default=0)
    else:  # the adapters of a bucket straddle a partition's edge
        flat = min(z.reduce_bucket_size, r.parts.num_trainable)
    copies = 2 if z.overlap_comm else 1
    buckets = (ipg_bytes(z, stage, width) // copies,) * copies if z.contiguous_gradients else ()
    return buckets, width * flat, z.overlap_comm


def zero2_step_reserved(r, loss_events: list[int], conf: AllocatorConf | None = None, required: bool = False) -> int:
    """Bytes reserved beyond the optimizer-step phase's allocated bytes at DeepSpeed ZeRO-2's
    step without optimizer offload: the segments the micro-batch's loss left cached (``loss_events``,
    :func:`vramfit.estimate.transients.step_transients`) and those the step's flat partition-sized tensors opened beyond their own live bytes.
    Each of those is larger than the loss's cached blocks at the usual micro-batch, so it opens a segment of its own,
    and the freed 16-bit ones cannot serve the fp32 ones; 0 when ZeRO-2 does not run this step.

    DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py (0.19.8 the same without pre-flattened gradients):
    ``copy_grads_in_partition`` puts this GPU's 16-bit gradients in one ``grads_in_partition`` buffer in backward
    (``contiguous_gradients``, the default); ``step``: ``self.flatten(self.averaged_gradients[i])`` (16-bit),
    ``.to(fp32)``, the flat copy dropped, ``free_grad_in_param_list(self.params_in_partition[i])`` and
    ``averaged_gradients[i] = None`` (the buffer goes), ``self._optimizer_step(i)`` (foreach AdamW:
    ``torch._foreach_sqrt`` copies the fp32 second moment, :func:`vramfit.estimate.step_grads.ds_foreach_step`), then
    ``single_partition_of_fp32_groups[i].grad = None``. Before the flatten, full fine-tuning's gradient norm takes a
    float64 copy of each gradient in turn (``scaled_global_norm``, :func:`zero12_norm_piece`): the largest opens a
    segment the smaller ones split. One param group's partition stands for all: the Trainer's no-decay group
    (biases, norms) is small. ``vramfit simulate`` (DeepSpeed 0.19.8, Qwen2.5-0.5B, 2 GPUs, full depth) opens the
    same float64 (1.01 GiB, the whole embedding on rank 0) and foreach sqrt (0.92 GiB) segments.

    DeepSpeed 0.19's flatten on the GPU (estimate/ds_load.py ``flatten_events``) comes first: the 16-bit parameters the
    engine moved there one by one are freed once flattened and stay cached, up to the whole 16-bit model, which
    ``max_memory_reserved`` on a roomy card counts (the simulator: Qwen2.5-3B +5.75 GiB) and later tensors reuse
    where they fit. ZeRO-1 runs the same step in the same class (stage_1_and_2.py ``DeepSpeedZeroOptimizer``,
    ``partition_grads=False``): it first frees the gradients outside its partition (``free_grad_in_param_list(self.
    params_not_in_partition[i])``), then flattens, casts and steps the partition as ZeRO-2 does; the engine on
    Qwen2.5-0.5B (bf16, seq 256, 2 GPUs, full depth) reserves 8,596,226,048 B under ZeRO-1 and ZeRO-2 alike (the
    16-bit gradients ZeRO-1 holds outside its partition in backward, freed there, leave no segment above that).
    ``required``: without the segments that hold no live block when the most are live: a failed
    ``cudaMalloc`` releases every wholly free cached segment and retries
    (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``malloc``: ``release_cached_blocks``), so a card
    without the room runs without them (:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel` ``required``,
    :func:`_zero2_replay`).
    Under ``overlap_comm`` the 16-bit gradient buffers are the reduction stream's (:func:`partition_grads_on_side_stream`):
    their segments serve no step tensor; ``vramfit simulate`` (its engine given that stream) agrees within 1 %
    (tests/sim/test_sim_deepspeed_overlap.py)."""
    from vramfit.estimate.framework import OptimizerImpl
    from vramfit.scenario import Method, Offload, Optimizer, Parallelism, Precision

    sc = r.sc
    if (sc.parallelism not in (Parallelism.ZERO1, Parallelism.ZERO2) or sc.offload is not Offload.NONE
            or sc.precision is Precision.FP32
            or sc.num_gpus < 2 or not r.parts.num_trainable):
        return 0
    group = shard(r.parts.num_trainable, sc.num_gpus)
    # the 16-bit buffer: rank 0's parameters whole (zero12_partition); ZeRO-1 makes the same one in the same
    # ``copy_grads_in_partition`` (0.19.8 reduce_ipg_grads, "zero stage 1": the engine's 478.9 MB on Qwen2.5-0.5B)
    banks = r.profile.runs_transformers_modeling
    grads = grads_in_partition(r.spec, replace(sc, parallelism=Parallelism.ZERO2), banks) or group
    norm = 8 * zero12_norm_piece(r.spec, group) if sc.method is Method.FULL else 0
    foreach = sc.optimizer is Optimizer.ADAMW and r.profile.torch_optimizer_impl is OptimizerImpl.FOREACH
    from vramfit.estimate.ds_load import flatten_events

    load = flatten_events(r)
    side = partition_grads_on_side_stream(r)
    # the loss's runs bounded as every replay bounds them (allocator.coarsen: the list itself where none is long)
    accum = sc.grad_accum if sc.parallelism is Parallelism.ZERO2 else 1
    events, windows, streams = _zero2_events(coarsen(loss_events, conf), (group, grads), sc.precision.compute_bytes,
                                             norm, foreach, load, side, accum, ipg_reduction(r))
    reserved, at_step, needed = _zero2_replay(tuple(events), tuple(windows), conf, streams)
    return max(0, (needed if required else reserved) - at_step) // K_ROUND_LARGE.value * K_ROUND_LARGE.value


@lru_cache(maxsize=1024)  # the reserved and the required figure replay the same events
def _zero2_replay(events: tuple[int, ...], windows: tuple, conf: AllocatorConf | None,
                  streams: frozenset[int] = frozenset()) -> tuple[int, int, int]:
    """(peak reserved, peak live bytes in ``windows``, the most the segments holding a live block ever reach,
    ``stats.peak_required``) of ``events`` replayed through
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`, the simulator's ``required``: at any allocation a
    card without the room releases every wholly free segment, the flatten's originals, the reduction stream's and
    the step's own alike, and retries. (Only the originals and the reduction stream's came off before: Llama-3.1-8B
    full under ZeRO-2 needed 38.54 GiB per GPU on 8 GPUs and 37.60 GiB on 7, a freed float64 norm copy's segment
    cached at the step; now 34.98 GiB, monotone in the GPU count, micro-batch and sequence, a fused loss no more
    than the standard one: tests/estimate/test_zero2_required.py.) ``streams``: the allocations (1-based, in order)
    made on the reduction stream, whose pool no default-stream request can take from."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    model, blocks, sizes, live, at_step = CachingAllocatorModel(conf), [], [], 0, 0
    for i, ev in enumerate(events):  # live: the step's bytes at 512-byte rounding (master and states included)
        if ev >= 0:
            blocks.append(model.malloc(ev, 1 if len(blocks) + 1 in streams else 0))
            sizes.append(round_allocation(ev))
            live += sizes[-1]
        else:
            model.free(blocks[-ev - 1])
            live -= sizes[-ev - 1]
        if any(a <= i < b for a, b in windows):
            at_step = max(at_step, live)
    return model.stats.peak_reserved, at_step, model.stats.peak_required


def _optimizer_step(ev: list[int], alloc, grads: int, first: bool, sizes: tuple[int, int, int], foreach: bool) -> None:
    """One ZeRO-1/2 optimizer step's events after backward (:func:`_zero2_events`): ``sizes`` = (the flat 16-bit
    partition copy, its fp32 cast, the norm's float64 copy) in bytes; ``grads`` the 16-bit gradient buffer's
    allocation number, dropped once copied; the first step makes the two AdamW states."""
    flat16_bytes, fp32_bytes, norm = sizes
    ev.append(-alloc(norm))
    flat16, fp32 = alloc(flat16_bytes), alloc(fp32_bytes)
    ev.extend((-flat16, -grads))
    if first:
        alloc(fp32_bytes)
        alloc(fp32_bytes)
    if foreach:
        ev.append(-alloc(fp32_bytes))
    ev.append(-fp32)


def _zero2_events(loss_events: list[int], sizes: tuple[int, int], c: int, norm: int, foreach: bool,
                  load: list[int] | None = None, side: bool = False,
                  accum: int = 1, ipg: tuple[tuple[int, ...], int, bool] | None = None,
                  ) -> tuple[list[int], list, frozenset[int]]:
    """The model load, then two steps (the first makes the optimizer states), as :func:`transient_reserved` events,
    the index windows of the steps and the allocations on the reduction stream. ``sizes``: (the partition, the
    16-bit gradient buffer: rank 0's parameters whole, zero12_partition.py ``grads_in_partition``), elements.
    ``load``: the flatten's events (ds_load.py ``flatten_events``). Load (DeepSpeed v0.16.2 stage_1_and_2.py
    ``__init__``): the fp32 master partition is ``bit16_partition.to(device).clone().float()`` (the 16-bit clone
    goes); ``initialize_optimizer_states`` makes a zero fp32 gradient partition and drops it: both stay cached.
    Each step: the loss's tensors, the 16-bit gradient buffer, then :func:`_optimizer_step`. ``accum`` > 1: each
    later micro-batch makes a second 16-bit buffer beside the sum and drops it (:func:`partition_grads_on_side_stream`).
    ``side``: both 16-bit buffers on the reduction stream. ``ipg`` (:func:`ipg_reduction`): the IPG buckets made at
    backward's first gradient hook, the largest flat copy of a bucket's reduction (made and freed before the 16-bit
    buffer; on the reduction stream when its flag is set), the buckets freed after it (``_release_ipg_buffers``).
    """
    group, partition_grads = sizes  # elements: the partition; the 16-bit gradient buffer (grads_in_partition)
    buckets, flat, flat_on_side = ipg or ((), 0, False)
    ev: list[int] = list(load or ())
    count = sum(1 for e in ev if e >= 0)

    def alloc(n: int) -> int:
        nonlocal count
        ev.append(n)
        count += 1
        return count

    clone = alloc(c * group)
    alloc(4 * group)  # the fp32 master partition, kept
    ev.append(-clone)
    ev.append(-alloc(4 * group))  # the zero gradient of initialize_optimizer_states, made and dropped
    windows, on_side, flat_side = [], set(), set()

    def loss() -> None:
        nonlocal count
        base = count
        ev.extend(e if e >= 0 else e - base for e in loss_events)
        count += sum(1 for e in loss_events if e >= 0)

    for first in (True, False):
        loss()
        held = [alloc(b) for b in buckets]
        if flat:
            reduce_copy = alloc(flat)
            ev.append(-reduce_copy)
            flat_side.add(reduce_copy)
        grads = alloc(c * partition_grads)
        on_side.add(grads)
        ev.extend(-b for b in held)
        start = len(ev)  # the step's window: from the end of backward, the buckets released
        if accum > 1:  # a later micro-batch: its own buffer beside the sum, dropped once added in
            windows.append((start, len(ev)))
            loss()
            second = alloc(c * partition_grads)
            on_side.add(second)
            ev.append(-second)
            start = len(ev)
        _optimizer_step(ev, alloc, grads, first, (c * group, 4 * group, norm), foreach)
        windows.append((start, len(ev)))
    return ev, windows, frozenset((on_side if side else set()) | (flat_side if flat_on_side else set()))


def flatten_cached(r) -> int:
    """Bytes of the segments the GPU flatten's freed originals leave cached (estimate/ds_load.py ``flatten_events``
    replayed through :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`): the per-parameter segments of the
    16-bit model, which :func:`zero2_step_reserved` counts whole. Backward's activations are carved from them: the
    engine's trace (`vramfit simulate --full-depth`, DeepSpeed 0.19.8, Qwen2.5-0.5B bf16 seq 256, 2 GPUs, ``{"stage":
    2}``) opens no large-pool segment in the first forward/backward but the loss's, the IPG bucket's and the flat copy's:
    the MLP's 2.5 MB activations split the 20 MiB segments the 8.7 MB originals left. So the generic per-tensor and
    activation slack (estimate/reserved.py ``reserved_bytes``) is not extra at the step, up to these bytes."""
    from vramfit.estimate.ds_load import flatten_events

    return _wholly_free_after(tuple(flatten_events(r)))


@lru_cache(maxsize=256)  # a pure function of the events: the plan search repeats one load over many micro-batches
def _wholly_free_after(events: tuple[int, ...]) -> int:
    """Bytes of the segments wholly free once ``events`` (``n``: allocate, ``-k``: free the ``k``-th) are replayed."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    model, blocks = CachingAllocatorModel(), []
    for ev in events:
        if ev >= 0:
            blocks.append(model.malloc(ev))
        else:
            model.free(blocks[-ev - 1])
    return model.wholly_free_bytes(model.segments())
