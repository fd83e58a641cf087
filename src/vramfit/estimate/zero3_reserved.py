"""ZeRO-3 with the optimizer offloaded, replayed through the caching allocator: the segments its load leaves cached
and those the boundary micro-batch's big tensors open beside them (the reserved figure's floor).

DeepSpeed 0.19.8 runtime/zero/stage3.py, full fine-tuning, ``offload_optimizer`` (with or without ``offload_param``):

- Load (``DeepSpeedZeRoOffload`` / ``_convert_to_zero_parameters``: ``param.partition()``, partition_parameters.py):
  each 16-bit parameter, moved to the GPU whole after the engine's cast, gets its partition (``ds_tensor``,
  ``ceil(numel / world)`` elements) and its whole storage is freed, so its segment stays cached (one per parameter of
  1 MiB or more); the partitions are then flattened into ``fp16_partitioned_groups_flat`` (``_create_fp16_partitions``,
  on the GPU unless ``offload_param``) and the single ones freed.
- Boundary micro-batch: the output layer's weight is gathered whole (``fetch_sub_module``: the partitions'
  all-gather into a ``c x numel`` buffer, released by the module's post-forward hook before the loss runs) for the
  head's matmul and again for its backward; the loss's tensors (estimate/transients.py ``step_transients``); the output layer's weight gradient
  (``mm``; a tied weight's is held until the embedding's own gradient is merged into it, estimate/ds_offload.py
  ``_backward_events``); at the end of backward the embedding gathered for its backward, its gradient; each gradient
  partition reduced then taken at the boundary (``partition_grads`` -> ``_offload_grad_partition_at_boundary``): the
  host grad buffer copied to the GPU (``grad_buffer.to(grad_partition.device)``, 16-bit), its norm in float64
  (``_constant_buffered_norm2``: ``part.data.to(get_norm_dtype())`` per 250,000,000-element part) and its cast to fp32
  (``grad_buffer.to(dtype=self.master_weights_and_grads_dtype)``). Only the output layer's and the embedding's are
  replayed: the block linears' are far smaller and split the cached segments these leave.

`vramfit simulate --full-depth` (Qwen2.5-0.5B, bf16-true, seq 256, 2 GPUs): with ``offload_optimizer`` the engine's
default stream holds 1,632 MiB after the load (the originals' segments, the 472 MiB flat partition) and opens 150 +
150 (the fp32 log-softmax output and its gradient), 260 + 260 (the tied weight's two gradients) and 520 (the
embedding partition's float64 norm copy) in the boundary micro-batch, 3,052 MiB in all; with ``offload_param`` too the
flat partition is the host's: 2,580 MiB. Not replayed: the saved activations (the small pool's segments, 76 MiB there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import Method, Offload, Parallelism
from vramfit.estimate.state import shard

if TYPE_CHECKING:
    from vramfit.estimate.step import Step

NORM_PART = 250_000_000  # DeepSpeed 0.19.8 stage3.py _constant_buffered_norm2(input, buffer_size=250000000)


def zero3_offload_replays(r: Step) -> bool:
    sc = r.sc
    return sc.parallelism is Parallelism.ZERO3 and sc.offload is not Offload.NONE and sc.method is Method.FULL


def zero3_load_events(r: Step) -> list[int]:
    """The load as allocator events (estimate/allocator.py ``transient_reserved``'s form): every 16-bit parameter
    whole, then each one's partition made and the whole one freed, the flat 16-bit partition (kept, on the GPU
    unless ``offload_param``), the single partitions freed."""
    from vramfit.estimate.params import base_tensors

    c, n = r.sc.precision.compute_bytes, r.sc.num_gpus
    sizes = [t.numel for t in base_tensors(r.spec) for _ in range(t.count)]
    ev = [c * s for s in sizes]
    k = len(sizes)
    for i, s in enumerate(sizes):
        ev.append(c * shard(s, n))
        k += 1
        ev.append(-(i + 1))
    parts = range(len(sizes) + 1, k + 1)
    if r.sc.offload is not Offload.OPTIMIZER_PARAMS:
        ev.append(c * shard(r.parts.num_trainable, n))
    ev.extend(-p for p in parts)
    return ev


def zero3_offload_reserved(r: Step) -> int:
    """Peak reserved bytes of the load and the boundary micro-batch's big tensors (module docstring) replayed through
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`; 0 where this path does not run."""
    from vramfit.estimate.allocator import _replay

    if not zero3_offload_replays(r):
        return 0
    load = zero3_load_events(r)
    return _replay(tuple(load + _shifted(_micro_batch(r), sum(1 for e in load if e >= 0))), r.profile.alloc_conf)[1]


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
    if spec.lm_head_params:
        _boundary(ev, alloc, c, shard(head_numel, sc.num_gpus))
        ev.append(-head)
    gathered = alloc(c * spec.embedding_params)
    grad = alloc(c * spec.embedding_params)
    ev.append(-gathered)
    if not spec.lm_head_params:  # merged in place into the output layer's gradient, then copied
        ev.append(-grad)
        grad = alloc(c * spec.embedding_params)
        ev.append(-head)
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
