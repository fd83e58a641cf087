"""ZeRO-3 full fine-tuning replayed through the caching allocator: the segments its load leaves cached and those the
micro-batch's and the step's big tensors open beside them (a floor under the reserved figure, estimate/ds_offload.py
``offload_reserved``).

DeepSpeed 0.19.8 runtime/zero/stage3.py:

- Load (:func:`zero3_load_events`): each 16-bit parameter whole, then partitioned (``ds_tensor``, ``ceil(numel /
  world)`` elements) and the whole one freed; the partitions flattened into ``fp16_partitioned_groups_flat``
  (``_create_fp16_partitions``, on the GPU unless ``offload_param``); without the optimizer offloaded the fp32 master
  partition and the 16-bit gradient partitions beside it.
- Micro-batch (:func:`_micro_batch`): the output layer's weight gathered whole (``fetch_sub_module``: the partitions'
  all-gather into a ``c x numel`` buffer, released by the module's post-forward hook before the loss runs) for the
  head's matmul and again for its backward; the loss's tensors (estimate/transients.py ``step_transients``); the
  output layer's weight gradient (``mm``; a tied weight's is held until the embedding's own gradient is merged into
  it, estimate/ds_offload.py ``_backward_events``); at the end of backward the embedding gathered for its backward
  and its gradient. With the optimizer offloaded each gradient partition is taken at the boundary (``partition_grads``
  -> ``_offload_grad_partition_at_boundary``): the host grad buffer copied to the GPU (``grad_buffer.to(
  grad_partition.device)``, 16-bit), its norm in float64 (``_constant_buffered_norm2``: ``part.data.to(
  get_norm_dtype())`` per 250,000,000-element part) and its cast to fp32 (``grad_buffer.to(dtype=
  self.master_weights_and_grads_dtype)``). Only the output layer's and the embedding's are replayed: the block
  linears' are far smaller and split the cached segments these leave.
- Step without the optimizer offloaded (:func:`_step`): the norm's float64 copy, then sub-group by sub-group
  (:func:`sub_groups`) the flat fp32 gradient and the first step's AdamW states.

`vramfit simulate --full-depth` (Qwen2.5-0.5B, bf16-true, seq 256, 2 GPUs; TinyLlama-1.1B, seq 512;
tests/sim/test_sim_deepspeed_zero3_reserved.py): the replay of the simulator's own run (``as_simulated``: the model built
whole, ``empty_cache`` a no-op on its CPU accelerator) reserves within 0.1 % of the engine without offload, with
``offload_optimizer`` and with ``offload_param`` too. The estimate replays the GPU run (zero.Init's load, defragment's
``empty_cache``). Not replayed: the saved activations (carved from the cached segments, or the small pool's: 76 MiB
there, about what the replay's packing of the 1-10 MiB originals adds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import Method, Offload, Parallelism
from vramfit.estimate.state import shard

if TYPE_CHECKING:
    from vramfit.estimate.step import Step

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
        ev.extend((4 * max(sub_groups(r)), -(k + 1), c * flat))  # initialize_optimizer_states' zero gradient
    return ev, empty


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
    full fine-tuning does not run."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    if not zero3_replays(r):
        return 0
    ev, empty = zero3_load_events(r, as_simulated)
    for first in (True, False):
        for part in (_micro_batch(r), _step(r, first)):
            ev += _shifted(part, sum(1 for e in ev if e >= 0))
    model, blocks = CachingAllocatorModel(r.profile.alloc_conf), []
    for i, e in enumerate(ev):
        if i == empty:
            model.empty_cache()
        if e >= 0:
            blocks.append(model.malloc(e))
        else:
            model.free(blocks[-e - 1])
    return model.stats.peak_reserved


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


def _micro_batch(r: Step) -> list[int]:
    """The boundary micro-batch's big tensors (module docstring), numbered from 1 in their own list."""
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

    ev.append(-alloc(c * head_numel))  # the output layer's weight gathered for the head's matmul, released after it
    loss = step_transients(r)
    ev.extend(_shifted(loss, count))
    count += sum(1 for e in loss if e >= 0)
    gathered = alloc(c * head_numel)  # again for its backward
    head = alloc(c * head_numel)
    ev.append(-gathered)
    offloaded = sc.offload is not Offload.NONE  # else partition_grads copies into the GPU's gradient partitions
    if spec.lm_head_params:
        if offloaded:
            _boundary(ev, alloc, c, shard(head_numel, sc.num_gpus))
        ev.append(-head)
    gathered = alloc(c * spec.embedding_params)
    grad = alloc(c * spec.embedding_params)
    ev.append(-gathered)
    if not spec.lm_head_params:  # merged in place into the output layer's gradient, then copied
        ev.append(-grad)
        grad = alloc(c * spec.embedding_params)
        ev.append(-head)
    if offloaded:
        _boundary(ev, alloc, c, shard(spec.embedding_params, sc.num_gpus))
    ev.append(-grad)
    return ev


def _boundary(ev: list[int], alloc, c: int, part: int) -> None:
    """One gradient partition taken at the boundary: its 16-bit GPU copy, the float64 norm copy of each part, the
    fp32 cast (``_offload_grad_partition_at_boundary``), each freed after use."""
    copy = alloc(c * part)
    ev.append(-alloc(8 * min(part, NORM_PART)))
    ev.append(-alloc(4 * part))
    ev.append(-copy)
