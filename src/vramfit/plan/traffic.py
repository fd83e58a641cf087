"""Bytes a training step moves between GPUs, nodes and the host, and how much of it waits.

Split from :mod:`vramfit.plan.throughput` (which times them): per GPU per optimizer step, from the
scenario's parallelism, checkpointing, offload and node layout.
"""

from __future__ import annotations

from vramfit.scenario import Checkpointing, Offload, Parallelism, Scenario


def comm_bytes(sc: Scenario, param_bytes: int, grad_bytes: int, trainable16: int) -> tuple[float, float]:
    """(GPU-to-GPU bytes, host-link bytes) per GPU per optimizer step.

    ZeRO-3/FSDP gather each layer's weights :func:`weight_gathers` times per micro-batch.
    """
    n, ga = sc.num_gpus, sc.grad_accum
    ring = (n - 1) / n if n > 1 else 0.0
    p = sc.parallelism
    if n == 1 or p is Parallelism.NONE:
        peer = 0.0
    elif p in (Parallelism.DDP, Parallelism.ZERO1, Parallelism.FSDP_NO_SHARD):
        # all-reduce of the gradients once per step (no_sync between); FSDP NO_SHARD all-reduces each unit's flat
        # gradient and gathers nothing (torch v2.13.0 distributed/fsdp/_runtime_utils.py _reduce_grad_no_shard)
        peer = 2 * ring * grad_bytes
    elif p in (Parallelism.ZERO2, Parallelism.FSDP_GRAD_OP):
        peer = ring * grad_bytes * ga + ring * trainable16  # reduce-scatter each micro-batch, gather params
    else:  # zero3 / fsdp: gather the weights for forward and backward of every micro-batch
        peer = (weight_gathers(sc) * ring * param_bytes + ring * grad_bytes) * ga
    host = 0.0
    if sc.offload is not Offload.NONE:
        host = (grad_bytes + trainable16) / n  # gradients out, updated 16-bit weights back
    if sc.offload is Offload.OPTIMIZER_PARAMS:
        host += 2 * param_bytes / n * ga  # each GPU's weight shard fetched for forward and backward
    return peer, host


def weight_gathers(sc: Scenario) -> int:
    """All-gathers of each layer's sharded weights per micro-batch: forward and backward, and for ZeRO-3
    under full checkpointing a third for the recomputed forward.

    DeepSpeed fires its fetch hooks on every module forward, the recomputed one included (stage3
    ``_pre_forward_module_hook``). FSDP unshards a unit in its pre-backward hook and the
    non-reentrant checkpoint inside the unit recomputes on those unsharded weights (torch
    ``distributed/fsdp/_runtime_utils.py _pre_backward_hook``; FSDP2 ``FSDPParamGroup.pre_backward``),
    so FSDP gathers twice either way.
    """
    full = sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    return 3 if (full and sc.parallelism is Parallelism.ZERO3) else 2


def zero3_exposed_share(sc: Scenario, hidden_size: int, block_weights: float) -> float:
    """Share of each layer's ZeRO-3 weight all-gather that waits on the critical path.

    DeepSpeed fetches a module's partitioned weights when the module runs and prefetches at most
    ``stage3_prefetch_bucket_size`` elements of the modules that follow (deepspeedai/DeepSpeed
    runtime/zero/partitioned_param_coordinator.py ``fetch_sub_module``: ``__prefetch_bucket_sz``); the
    HF Trainer fills "auto" with ``0.9 h^2`` (estimate/deepspeed.py). A decoder block holds about
    ``12 h^2`` weights (``block_weights``), so only that bucket of the next block arrives during the
    current one: the rest, ``1 - bucket / block weights``, is transferred while the GPU waits.
    """
    from vramfit.estimate import deepspeed as ds

    if not hidden_size or not block_weights:
        return 0.0
    bucket = ds.resolve(sc.deepspeed_config, hidden_size, 3).prefetch_bucket_size
    return max(0.0, 1.0 - bucket / block_weights)


def zero3_gather_bytes(sc: Scenario, param_bytes: int) -> tuple[float, float]:
    """(inside the node, across nodes) bytes of ZeRO-3's weight all-gathers per GPU per optimizer step, the
    gather part of :func:`comm_bytes` as :func:`split_nodes` places it."""
    n, k, g, ga = sc.num_gpus, sc.num_nodes, sc.gpus_per_node, sc.grad_accum
    if sc.parallelism is not Parallelism.ZERO3 or n == 1:
        return 0.0, 0.0
    gathers, ring_all = weight_gathers(sc), (n - 1) / n
    if k <= 1:
        return gathers * ring_all * param_bytes * ga, 0.0
    if sc.shard_scope.value == "node":  # ZeRO++ hpZ: the forward gather crosses nodes, the others stay inside
        return (gathers - 1) * (g - 1) / g * param_bytes * ga, ring_all * param_bytes * ga
    return 0.0, gathers * ring_all * param_bytes * ga


def split_nodes(sc: Scenario, peer: float, param_bytes: int, grad_bytes: int, layers: int) -> tuple[float, float, int]:
    """(bytes at the node's GPU-to-GPU rate, bytes at the inter-node bus rate, inter-node ring steps) per GPU
    per optimizer step; one node: ``(peer, 0, 0)``.

    A ring over ranks of several nodes runs at the bus bandwidth of its slowest hop, the node's NICs
    (:mod:`vramfit.nodes`), so flat DDP/ZeRO/FSDP traffic all moves there. HSDP (``shard_scope=node``
    on FSDP) all-gathers and reduce-scatters inside the node, then all-reduces each rank's gradient
    shard (1/g) with its peers on the other nodes: g such rings share the node's NICs, which is
    ``2 (k-1)/k x grad_bytes`` at the NIC rate, every micro-batch (FSDP reduces each backward unless
    told not to). ZeRO++ hpZ (ZeRO-3, ``shard_scope=node``) gathers only the forward weights across
    nodes; the backward (and recompute) gathers read the node-local copy (Wang et al. 2023, ZeRO++,
    arXiv:2306.10209, sec. 3.2). Latency: one inter-node step per node boundary per ring collective,
    one collective per layer per gather or reduce (NCCL tuning.cc ``nInterSteps``).
    """
    k, g, n, ga = sc.num_nodes, sc.gpus_per_node, sc.num_gpus, sc.grad_accum
    if k <= 1 or not peer:
        return peer, 0.0, 0
    ring_all, ring_node = (n - 1) / n, (g - 1) / g
    gathers = weight_gathers(sc)
    p = sc.parallelism
    if p in (Parallelism.NONE, Parallelism.DDP, Parallelism.ZERO1, Parallelism.FSDP_NO_SHARD):
        return 0.0, peer, 2 * (k - 1) * layers  # gradient all-reduce (bucketed: about one per layer)
    node = sc.shard_scope.value == "node"
    if node and p in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP):
        if p is Parallelism.FSDP:
            inside = (gathers * ring_node * param_bytes + ring_node * grad_bytes) * ga
        else:  # SHARD_GRAD_OP: weights gathered once per step, as in comm_bytes
            inside = ring_node * grad_bytes * ga + ring_node * param_bytes
        across = 2 * (k - 1) / k * grad_bytes * ga
        return inside, across, 2 * (k - 1) * layers * ga
    if node and p is Parallelism.ZERO3:
        inside = (gathers - 1) * ring_node * param_bytes * ga
        across = (ring_all * param_bytes + ring_all * grad_bytes) * ga
        return inside, across, 2 * (k - 1) * layers * ga
    per_mb = (gathers + 1) if p in (Parallelism.ZERO3, Parallelism.FSDP) else 2
    return 0.0, peer, (k - 1) * layers * per_mb * ga


def fsdp_serial_gather_bytes(sc: Scenario, param_bytes: int) -> tuple[float, float]:
    """(inside the node, across nodes) bytes of FSDP weight all-gathers per GPU per step that wait on the
    critical path when LoRA units nest in the decoder layers' units under FSDP1's rate limiter.

    ``_unshard`` waits on the oldest of the last two free events before it issues an all-gather
    (torch v2.13.0 distributed/fsdp/_runtime_utils.py ``_unshard``: ``_free_event_queue.dequeue_if_needed()``
    then ``event.synchronize()``; ``_limiter_utils.py`` ``_max_num_inflight_all_gathers = 2``), and every
    nested LoRA unit records one when it reshards. The last two are the final adapters of the running layer,
    so the next layer's gather is issued only when that layer's compute is nearly done, and the GPU waits for
    it: every weight gather of the step adds instead of hiding behind compute (forward and backward alike).
    """
    if sc.parallelism is not Parallelism.FSDP:
        return 0.0, 0.0
    return whole_gathers(sc, weight_gathers(sc) * sc.grad_accum, param_bytes)


def whole_gathers(sc: Scenario, count: float, param_bytes: float) -> tuple[float, float]:
    """(inside the node, across nodes) bytes per GPU of ``count`` all-gathers of the whole sharded model under FSDP
    or ZeRO-3 (each forward gathers every layer: torch FSDP ``_pre_forward_unshard``, DeepSpeed stage3
    ``fetch_sub_module``): a ring receives ``(n - 1) / n`` of the weights; HSDP (``shard_scope=node`` on FSDP) gathers
    inside the node, ZeRO++ hpZ's forward gather crosses nodes (:func:`zero3_gather_bytes`)."""
    n, k, g = sc.num_gpus, sc.num_nodes, sc.gpus_per_node
    if sc.parallelism not in (Parallelism.FSDP, Parallelism.ZERO3) or n == 1:
        return 0.0, 0.0
    if k <= 1:
        return count * (n - 1) / n * param_bytes, 0.0
    if sc.shard_scope.value == "node" and sc.parallelism is Parallelism.FSDP:
        return count * (g - 1) / g * param_bytes, 0.0
    return 0.0, count * (n - 1) / n * param_bytes
