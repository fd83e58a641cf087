"""What the device holds beyond the allocated peak: the caching allocator's reserved slack and the process
overheads outside it (CUDA context, NCCL buffers); moved out of estimate/core.py, which keeps the model state."""

from __future__ import annotations

from vramfit.estimate.allocator import (
    AllocatorConf,
    plain_peak,
    reserved_for_tensors,
    rounded_sum,
    transient_required,
    transient_reserved,
)
from vramfit.estimate.constants import (
    CUDA_CONTEXT,
    K_ROUND_LARGE,
    NCCL_CHANNELS,
    NCCL_CUDA_IPC_MIN,
    NCCL_LL128_BUFF,
    NCCL_LL_BUFF,
    NCCL_SIMPLE_BUFF,
)
from vramfit.estimate.core import Parts
from vramfit.scenario import Scenario


def reserved_bytes(allocated_peak: int, parts: Parts, per_layer_tensors: int, layers: int,
                   transients: list[int] | tuple[int, ...] = (), conf: AllocatorConf | None = None,
                   required: bool = False) -> int:
    """``max_memory_reserved``: the allocated peak plus what the caching allocator holds unused.

    Persistent tensors: each large one opens its own segment rounded to 2 MiB
    (``reserved_for_tensors``). Activations: tensors freed and re-requested every micro-batch are
    served from cached blocks; each distinct size leaves on average half a 2 MiB rounding unit
    unused (kRoundLarge, CUDACachingAllocator.cpp). Transients (``transients``, the step's big
    tensors in order, :func:`vramfit.estimate.transients.step_transients`): the segments they leave
    cached beyond their own high-water mark, e.g. a freed loss working set smaller than the loss
    gradient that follows it (:func:`vramfit.estimate.allocator.transient_reserved`). ``conf``: the framework's
    allocator settings; under them the transients' reserved figure is set against their high-water mark at the
    estimator's own 512-byte rounding, so a coarser ``roundup_power2_divisions`` rounding lands in the cached bytes.
    ``required``: the transients' segments that hold a live block at their peak, not every segment they leave
    cached (:func:`vramfit.estimate.allocator.transient_required`: what a card without headroom needs).
    """
    persistent_slack = reserved_for_tensors(parts.param_tensors) - rounded_sum(parts.param_tensors)
    if conf is not None and conf.expandable_segments:
        persistent_slack = 0  # loaded back to back into the one growing segment, no 2 MiB segment per tensor
    act_slack = per_layer_tensors * layers * (K_ROUND_LARGE.value // 2)
    cached = 0
    if transients:
        peak, reserved = transient_reserved(transients, conf)
        reserved = transient_required(transients, conf) if required else reserved
        peak = peak if conf is None else plain_peak(transients)
        # whole 2 MiB units only: what is under one unit is the live segments' own kRoundLarge
        # rounding, not a segment left cached (and would wobble with the micro-batch)
        cached = (reserved - peak) // K_ROUND_LARGE.value * K_ROUND_LARGE.value
    return allocated_peak + max(0, persistent_slack) + act_slack + cached


def process_bytes(sc: Scenario) -> tuple[int, int]:
    """CUDA context and NCCL buffers: outside PyTorch's allocator, in nvidia-smi's figure."""
    ctx = CUDA_CONTEXT.value
    nccl = 0
    if sc.num_gpus > 1:
        per_peer = NCCL_SIMPLE_BUFF.value + NCCL_LL_BUFF.value + NCCL_LL128_BUFF.value
        ipc_min = NCCL_CUDA_IPC_MIN.value
        aligned = -(-per_peer // ipc_min) * ipc_min  # ALIGN_SIZE(recvSize, CUDA_IPC_MIN)
        nccl = NCCL_CHANNELS.value * 2 * aligned  # ring: a receive buffer from each of 2 neighbours
    return ctx, nccl
