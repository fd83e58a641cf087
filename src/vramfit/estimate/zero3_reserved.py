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
- Step without the optimizer offloaded (:func:`_step`): the norm's float64 copy, the flat fp32 gradient, the first
  step's AdamW states.

`vramfit simulate --full-depth` (Qwen2.5-0.5B, bf16-true, seq 256, 2 GPUs; tests/sim/test_sim_deepspeed_zero3_reserved.py):
the replay of the engine's own load (``built_whole``) reserves within 0.1 % of the engine without offload, with
``offload_optimizer`` and with ``offload_param`` too. Not replayed: the saved activations (carved from the cached
segments, or the small pool's: 76 MiB there, about what the replay's packing of the 1-10 MiB originals adds).
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


def zero3_load_events(r: Step, built_whole: bool = False) -> list[int]:
    """The load as allocator events (estimate/allocator.py ``transient_reserved``'s form): each 16-bit parameter whole,
    its partition, the whole one freed, one parameter after another (transformers 5.24.0 modeling_utils.py l. 1435-1446
    builds the model under ``deepspeed.zero.Init`` when ZeRO-3 is enabled, which partitions each module's parameters as
    it is made; integrations/deepspeed.py l. 522 loads each module's weights inside ``GatheredParameters``, gathered
    whole and partitioned again), so a freed whole parameter's segment serves the next that fits; then the flat 16-bit
    partition (kept, on the GPU unless ``offload_param``), the single partitions freed. ``built_whole``: the model
    built whole on the GPU before ``deepspeed.initialize`` partitions it (a script without transformers' zero.Init, and
    the simulator's engine, sim/deepspeed_zero.py ``materialize``): every whole parameter's segment stays cached. Without the optimizer offloaded (stage3.py
    ``_create_fp32_partitions``, l. 1169-1172: ``converted = fp16_partitioned_groups_flat[i].to(self.device,
    dtype=...)``, ``converted.clone().detach()`` kept; ``initialize_optimizer_states`` l. 1306: ``gradient_buffer =
    torch.zeros(int(largest_numel), ...)`` made and dropped; ``grad_partitions_flat_buffer`` l. 790, kept): the fp32
    master partition beside its freed conversion, the zero fp32 gradient, the 16-bit gradient partitions."""
    from vramfit.estimate.params import base_tensors

    c, n = r.sc.precision.compute_bytes, r.sc.num_gpus
    sizes = [t.numel for t in base_tensors(r.spec) for _ in range(t.count)]
    ev: list[int] = []
    if built_whole:  # every whole parameter first, then each partitioned (allocation m + i + 1) and freed
        m = len(sizes)
        ev = [c * s for s in sizes] + [e for i, s in enumerate(sizes) for e in (c * shard(s, n), -(i + 1))]
        parts = range(m + 1, 2 * m + 1)
    else:
        for i, s in enumerate(sizes):  # allocation 2i + 1: the whole parameter; 2i + 2: its partition
            ev.extend((c * s, c * shard(s, n), -(2 * i + 1)))
        parts = range(2, 2 * len(sizes) + 1, 2)
    k = 2 * len(sizes)
    flat = shard(r.parts.num_trainable, n)
    if r.sc.offload is not Offload.OPTIMIZER_PARAMS:
        ev.append(c * flat)
        k += 1
    ev.extend(-p for p in parts)
    if r.sc.offload is Offload.NONE and c == 4:  # fp32: ``.to(fp32)`` of an fp32 tensor is itself, then the clone
        ev.extend((4 * flat, 4 * flat, -(k + 2), c * flat))
    elif r.sc.offload is Offload.NONE:
        ev.extend((4 * flat, 4 * flat, -(k + 1), 4 * flat, -(k + 3), c * flat))
    return ev


def zero3_reserved_floor(r: Step, built_whole: bool = False) -> int:
    """Peak reserved bytes of the load and two steps' big tensors (module docstring) replayed through
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`; 0 where ZeRO-3 full fine-tuning does not run."""
    from vramfit.estimate.allocator import _replay

    if not zero3_replays(r):
        return 0
    ev = zero3_load_events(r, built_whole)
    for first in (True, False):
        for part in (_micro_batch(r), _step(r, first)):
            ev += _shifted(part, sum(1 for e in ev if e >= 0))
    return _replay(tuple(ev), r.profile.alloc_conf)[1]


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
    flat = shard(r.parts.num_trainable, n)
    largest = shard(r.spec.lm_head_params or r.spec.embedding_params, n)
    ev = [8 * largest, -1, c * flat] + ([4 * flat, -2] if c != 4 else [])  # fp32: the flat copy is the gradient
    if first:
        ev += [4 * flat, 4 * flat]
    return ev + [-3 if c != 4 else -2]


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
