"""ZeRO-3 full fine-tuning replayed through the caching allocator: the segments its load leaves cached and those the
micro-batch's and the step's big tensors open beside them (a floor under the reserved figure, estimate/ds_offload.py
``offload_reserved``).

DeepSpeed 0.19.8 runtime/zero/stage3.py:

- Load (:func:`zero3_load_events`): each 16-bit parameter whole, then partitioned (``ds_tensor``, ``ceil(numel /
  world)`` elements) and the whole one freed; the partitions flattened into ``fp16_partitioned_groups_flat``
  (``_create_fp16_partitions``, on the GPU unless ``offload_param``); without the optimizer offloaded the fp32 master
  partition; the IPG bucket (kept), the 16-bit gradient partitions (GPU without the optimizer offloaded), then each
  trainable parameter gathered whole and freed by ``create_reduce_and_remove_grad_hooks``.
- Micro-batch (:func:`_micro_batch`): the forward's saved activations, block by block, and (first micro-batch) the
  forward thread's cuBLAS workspaces, both kept, before the output layer's weight is gathered whole
  (``fetch_sub_module``: the partitions' all-gather into a ``c x numel`` buffer, released by the module's
  post-forward hook before the loss runs) for the head's matmul; the loss's tensors (estimate/transients.py
  ``step_transients``); the autograd thread's workspaces, the logits' gradient in the head's dtype, the weight
  gathered again and the output layer's weight gradient (``mm``; a tied weight's is held until the embedding's own
  gradient is merged into it, estimate/ds_offload.py ``_backward_events``); each block's backward working set, its
  saved tensors freed; the embedding gathered for its backward (held until its post-backward hook, after the
  gradient's reduction) and its gradient. With the optimizer offloaded each gradient partition is taken at the
  boundary (``partition_grads`` -> ``_offload_grad_partition_at_boundary``): the host grad buffer copied to the GPU
  (``grad_buffer.to(grad_partition.device)``, 16-bit), its norm in float64 (``_constant_buffered_norm2``: ``part.data.to(
  get_norm_dtype())`` per 250,000,000-element part) and its cast to fp32 (``grad_buffer.to(dtype=
  self.master_weights_and_grads_dtype)``). Only the output layer's and the embedding's are replayed: the block
  linears' are far smaller and split the cached segments these leave. Not replayed: the blocks' own weight gathers
  (at most a block linear each, reused from one to the next).
- Step without the optimizer offloaded (:func:`_step`): the norm's float64 copy, then sub-group by sub-group
  (:func:`sub_groups`) the flat fp32 gradient and the first step's AdamW states.

`vramfit simulate --full-depth` (Qwen2.5-0.5B, bf16-true, seq 256, 2 GPUs; TinyLlama-1.1B, seq 512;
tests/sim/test_sim_deepspeed_zero3_reserved.py), the engine tracing ``empty_cache``: the estimate replays the GPU run
(zero.Init's load, defragment's ``empty_cache``) and is -4.0 % (Qwen2.5-0.5B, no offload) and -1.7 % (TinyLlama) of
it; what the activations and workspaces do there: they take the free remainder of the fp32 conversion's segment, so
TinyLlama's flat 16-bit gradient copy opens a segment of its own. ``as_simulated`` replays the simulator's run before it
traced ``empty_cache`` (the model built whole, every load segment kept): +2.8 % with offload_param.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from vramfit.choices import Checkpointing, Method, Offload, Parallelism
from vramfit.estimate.state import shard

if TYPE_CHECKING:
    from vramfit.estimate.allocator import AllocatorConf
    from vramfit.estimate.step import Step
    from vramfit.sim.cuda_allocator import CachingAllocatorModel

NORM_PART = 250_000_000  # DeepSpeed 0.19.8 stage3.py _constant_buffered_norm2(input, buffer_size=250000000)


def zero3_replays(r: Step) -> bool:
    return r.sc.parallelism is Parallelism.ZERO3 and r.sc.method is Method.FULL


def zero3_load_events(r: Step, as_simulated: bool = False) -> tuple[list[int], int | None]:
    """(the load as allocator events, estimate/allocator.py ``transient_reserved``'s form; the index of the event
    before which ``empty_cache`` runs, None where it does not). Each 16-bit parameter whole, its partition, the whole
    one freed, one parameter after another (transformers 5.24.0 modeling_utils.py l. 1435-1446 builds the model under
    ``deepspeed.zero.Init`` when ZeRO-3 is enabled, which partitions each module's parameters as it is made;
    integrations/deepspeed.py l. 522 loads each module's weights inside ``GatheredParameters``, gathered whole and
    partitioned again). Then ``_create_fp16_partitions_with_defragmentation`` (stage3.py) without ``offload_param``
    calls ``defragment`` (runtime/zero/utils.py l. 215-241): every partition copied to a host buffer and freed,
    ``get_accelerator().empty_cache()`` (each wholly free cached segment goes back to the driver), the flat 16-bit
    partition copied back (``cpu_buffer.to(orig_device)``, kept); with ``offload_param`` the partitions live on the
    host. Without the optimizer offloaded (``_create_fp32_partitions`` l. 1169-1172: ``converted = fp16_partitioned_
    groups_flat[i].to(self.device, dtype=...)``, ``converted.clone().detach()`` kept; ``initialize_optimizer_states``
    l. 1306: ``gradient_buffer = torch.zeros(int(largest_numel), ...)`` made and dropped; ``grad_partitions_flat_buffer``
    l. 790, kept): the fp32 master partition beside its freed conversion, the zero fp32 gradient, the 16-bit gradient
    partitions. ``as_simulated``: as the simulator's engine runs it (sim/deepspeed_zero.py): the model built whole
    before ``deepspeed.initialize`` partitions it, and ``empty_cache`` a no-op (its CPU accelerator; the trace has
    no event for it), so every whole parameter's segment stays cached."""
    from vramfit.estimate.params import base_tensors

    c, n = r.sc.precision.compute_bytes, r.sc.num_gpus
    sizes = [t.numel for t in base_tensors(r.spec) for _ in range(t.count)]
    ev: list[int] = []
    if as_simulated:  # every whole parameter first, then each partitioned (allocation m + i + 1) and freed
        m = len(sizes)
        ev = [c * s for s in sizes] + [e for i, s in enumerate(sizes) for e in (c * shard(s, n), -(i + 1))]
        parts = range(m + 1, 2 * m + 1)
    else:
        for i, s in enumerate(sizes):  # allocation 2i + 1: the whole parameter; 2i + 2: its partition
            ev.extend((c * s, c * shard(s, n), -(2 * i + 1)))
        parts = range(2, 2 * len(sizes) + 1, 2)
    k = 2 * len(sizes)
    flat = shard(r.parts.num_trainable, n)
    ev.extend(-p for p in parts)
    empty = None
    if r.sc.offload is not Offload.OPTIMIZER_PARAMS:
        empty = None if as_simulated else len(ev)
        ev.append(c * flat)
        k += 1
    if r.sc.offload is Offload.NONE:
        for g in sub_groups(r):  # the fp32 master of each sub-group (fp32: ``.to(fp32)`` is itself, only the clone)
            ev.extend((4 * g, 4 * g, -(k + 1)) if c != 4 else (4 * g,))
            k += 2 if c != 4 else 1
        ev.extend((4 * max(sub_groups(r)), -(k + 1)))  # initialize_optimizer_states' zero gradient
    ev.append(c * _ipg_bucket(r))
    if r.sc.offload is Offload.NONE:
        ev.append(c * flat)  # grad_partitions_flat_buffer
    ev.extend(_hook_gathers(r, sum(1 for e in ev if e >= 0)))
    return ev, empty


def _ipg_bucket(r: Step) -> int:
    """Elements of the reduce bucket's flat buffer, made on the GPU and kept with contiguous_gradients (DeepSpeed
    0.19.8 stage3.py l. 780-784: ``bucket.buffer = torch.empty(self.reduce_bucket_size, ...)``, one per dtype)."""
    from vramfit.estimate.deepspeed import resolve

    ds = resolve(r.sc.deepspeed_config, r.spec.hidden_size, 3)
    return ds.reduce_bucket_size if ds.contiguous_gradients else 0


def _hook_gathers(r: Step, base: int) -> list[int]:
    """``create_reduce_and_remove_grad_hooks`` (stage3.py l. 1487-1531, run at the end of ``__init__``, l. 519):
    each trainable parameter gathered whole (``param.all_gather()``: ``_allgather_params_sequential``'s
    ``torch.empty(partition_size * world)``, partition_parameters.py l. 2142) and partitioned again once its hook is
    registered, one after another in module order (estimate/zero12_partition.py ``module_order``)."""
    from vramfit.estimate.zero12_partition import module_order

    c, n, ev = r.sc.precision.compute_bytes, r.sc.num_gpus, []
    for i, (numel, _) in enumerate(module_order(r.spec, r.profile.runs_transformers_modeling)):
        ev.extend((c * shard(numel, n) * n, -(base + i + 1)))
    return ev


def sub_groups(r: Step) -> list[int]:
    """Elements of this GPU's partition in each optimizer sub-group (stage3.py ``_create_fp16_sub_groups``: parameters in
    order, a sub-group closed once its partitions reach ``sub_group_size``, estimate/deepspeed.py ``resolve``)."""
    from vramfit.estimate.deepspeed import resolve
    from vramfit.estimate.zero12_partition import module_order

    size = resolve(r.sc.deepspeed_config, r.spec.hidden_size, 3).sub_group_size
    out, acc = [], 0
    for n, _ in module_order(r.spec, r.profile.runs_transformers_modeling):
        acc += shard(n, r.sc.num_gpus)
        if acc >= size:
            out, acc = [*out, acc], 0
    return [*out, acc] if acc or not out else out


def zero3_reserved_floor(r: Step, as_simulated: bool = False) -> int:
    """Peak reserved bytes of the load and two steps' big tensors (module docstring) replayed through
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`, ``empty_cache`` where the load runs it; 0 where ZeRO-3
    full fine-tuning does not run. The load does not depend on the micro-batch: it is replayed once per distinct
    load (:func:`_loaded`) and each estimate replays its steps on a copy."""
    from vramfit.estimate.allocator import run_events

    if not zero3_replays(r):
        return 0
    ev, empty = zero3_load_events(r, as_simulated)
    model = _loaded(tuple(ev), empty, r.profile.alloc_conf).clone()
    steps: list[int] = []
    for first in (True, False):
        for part in (_micro_batch(r, first), _step(r, first)):
            steps += _shifted(part, sum(1 for e in steps if e >= 0))
    run_events(model, steps)
    return model.stats.peak_reserved


@lru_cache(maxsize=256)  # a pure function of the load's events: the planner and the web vary only the steps after it
def _loaded(events: tuple[int, ...], empty: int | None, conf: AllocatorConf | None) -> CachingAllocatorModel:
    """The allocator after the load's ``events``, ``empty_cache`` before event ``empty``; never changed (each
    estimate replays on its ``clone()``)."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    model, blocks = CachingAllocatorModel(conf), []
    for i, e in enumerate(events):
        if i == empty:
            model.empty_cache()
        if e >= 0:
            blocks.append(model.malloc(e))
        else:
            model.free(blocks[-e - 1])
    return model


def _step(r: Step, first: bool) -> list[int]:
    """The optimizer step without the optimizer offloaded (stage3.py ``step``): the float64 copy of the largest
    gradient partition for the norm (``get_grad_norm_direct`` l. 2457: ``g.to(...).to(get_norm_dtype()).norm()``,
    one gradient at a time), then ``_prepare_fp32_grad_for_sub_group`` (l. 2683-2690: ``self.flatten(
    self.averaged_gradients[i]).to(fp32)``, the 16-bit flat copy dropped), the first step's two AdamW states
    beside it, the fp32 gradient dropped after the step; numbered from 1 in its own list. Nothing with it offloaded
    (the host steps)."""
    if r.sc.offload is not Offload.NONE:
        return []
    c, n = r.sc.precision.compute_bytes, r.sc.num_gpus
    largest = shard(r.spec.lm_head_params or r.spec.embedding_params, n)
    ev, k = [8 * largest, -1], 1
    for g in sub_groups(r):  # one sub-group after another: its flat 16-bit copy, the fp32 cast (fp32: the copy itself)
        ev += [c * g] + ([4 * g, -(k + 1)] if c != 4 else [])
        grad = k + 2 if c != 4 else k + 1
        k = grad
        if first:  # the first step makes the sub-group's two AdamW states
            ev += [4 * g, 4 * g]
            k += 2
        ev.append(-grad)
    return ev


def _shifted(events: list[int], base: int) -> list[int]:
    return [e if e >= 0 else e - base for e in events]


def _micro_batch(r: Step, first: bool = False) -> list[int]:
    """The boundary micro-batch's big tensors (module docstring), numbered from 1 in their own list; ``first``: the
    run's first, whose first matmuls make the forward and the autograd thread's cuBLAS workspaces (kept)."""
    from vramfit.estimate.transients import step_transients

    spec, sc = r.spec, r.sc
    c, head_numel = sc.precision.compute_bytes, spec.lm_head_params or spec.embedding_params
    ev: list[int] = []
    count = 0

    def alloc(n: int) -> int:
        nonlocal count
        ev.append(n)
        count += 1
        return count

    held = _forward(r, alloc, first)
    ev.append(-alloc(c * head_numel))  # the output layer's weight gathered for the head's matmul, released after it
    loss = step_transients(r)
    ev.extend(_shifted(loss, count))
    count += sum(1 for e in loss if e >= 0)
    if first:  # the autograd thread's first matmul: the output layer's backward
        _workspaces(r, alloc)
    dlogits = alloc(c * sc.micro_batch_size * sc.seq_len * spec.vocab_size)  # the logits' gradient, as the head's
    gathered = alloc(c * head_numel)  # again for its backward
    head = alloc(c * head_numel)
    ev.extend((-gathered, -dlogits))
    recomputes = sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    for i, handles in reversed(list(enumerate(held))):  # each block's backward (held[0]: the embedding output):
        redone = [alloc(n) for n in r.saved.items.values()] if recomputes and i else []  # (recomputed,) its working
        ev.append(-alloc(r.block_transient))  # set, then what it saved goes
        ev.extend(-h for h in redone + handles)
    offloaded = sc.offload is not Offload.NONE  # else partition_grads copies into the GPU's gradient partitions
    if spec.lm_head_params:
        if offloaded:
            _boundary(ev, alloc, c, shard(head_numel, sc.num_gpus))
        ev.append(-head)
    gathered = alloc(c * spec.embedding_params)  # released by the embedding's post-backward hook, after its gradient's
    grad = alloc(c * spec.embedding_params)
    if not spec.lm_head_params:  # merged into the output layer's gradient (``out = old + new`` in place)
        ev.append(-grad)
        grad = head
    if offloaded:
        _boundary(ev, alloc, c, shard(spec.embedding_params, sc.num_gpus))
    ev.extend((-grad, -gathered))
    return ev


def _boundary(ev: list[int], alloc, c: int, part: int) -> None:
    """One gradient partition taken at the boundary: its 16-bit GPU copy, the float64 norm copy of each part, the
    fp32 cast (``_offload_grad_partition_at_boundary``), each freed after use."""
    copy = alloc(c * part)
    ev.append(-alloc(8 * min(part, NORM_PART)))
    ev.append(-alloc(4 * part))
    ev.append(-copy)


def _forward(r: Step, alloc, first: bool) -> list[list[int]]:
    """The micro-batch's forward up to the output layer: the embedding output (the lowest block's input) and each
    decoder block's saved tensors (estimate/step.py ``Step.saved``, tensor by tensor), kept for the backward. They are
    allocated before the output layer's weight is gathered, so the 1-10 MiB ones (large pool, pytorch/pytorch@eb42ad6e
    c10/cuda/CUDACachingAllocator.cpp ``get_pool``: above kSmallSize) are carved from the free blocks the load left
    cached (``get_free_block``, best fit, split), and the <= 1 MiB ones open 2 MiB small-pool segments of their own.
    Checkpointed blocks keep their input alone (full checkpointing recomputes the saved tensors in the block's
    backward, :func:`_micro_batch`; selective modes: what they keep beyond it is not replayed); offloaded
    checkpointing keeps the inputs on the host and recomputes the same way."""
    from vramfit.estimate.block_extras import block_input_bytes

    block_in = block_input_bytes(r.spec, r.sc, r.profile)
    held = [[alloc(block_in)]]
    if first:  # the forward thread's first matmul (the lowest block's)
        _workspaces(r, alloc)
    for _ in range(r.spec.num_hidden_layers):
        if r.sc.gradient_checkpointing is Checkpointing.NONE:
            held.append([alloc(n) for n in r.saved.items.values()])
        else:  # checkpointed: the block's output, the next one's input; offloaded: it waits on the host
            held.append([alloc(block_in)] if r.sc.gradient_checkpointing is not Checkpointing.OFFLOAD else [])
    return held


def _workspaces(r: Step, alloc) -> None:
    """One thread's cuBLAS and cuBLASLt workspaces (estimate/step.py ``workspaces``: half of ``Parts.workspaces``),
    made through the caching allocator at the thread's first matmul and kept (pytorch/pytorch@26a39059
    aten/src/ATen/cuda/CublasHandlePool.cpp); the cuBLAS one (8 MiB + 128 KiB, 32 MiB on sm90) is a large-pool block
    carved from the segment the load left a free remainder in."""
    from vramfit.estimate.constants import CUBLASLT_WORKSPACE

    alloc(r.parts.workspaces // 2 - CUBLASLT_WORKSPACE.value)
    alloc(CUBLASLT_WORKSPACE.value)
