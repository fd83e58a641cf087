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
from vramfit.estimate.constants import CUDA_CONTEXT, CUDA_CONTEXT_HOPPER, K_ROUND_LARGE, Constant
from vramfit.estimate.core import Parts
from vramfit.estimate.nccl import nccl_bytes
from vramfit.gpus import GPU, Arch
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


def context_constant(sc: Scenario, card: GPU | None = None) -> Constant:
    """The CUDA context and lazily loaded kernels of a training process on ``card`` (else the scenario's ``gpu``):
    the measured sm90 figure on Hopper cards (the catalog's architecture column), the general one elsewhere."""
    if card is None and sc.gpu:
        from vramfit.gpus import get_gpu

        card = get_gpu(sc.gpu)
    return CUDA_CONTEXT_HOPPER if card is not None and card.arch is Arch.HOPPER else CUDA_CONTEXT


def process_bytes(sc: Scenario, card: GPU | None = None) -> tuple[int, int]:
    """CUDA context and NCCL buffers: outside PyTorch's allocator, in nvidia-smi's figure (estimate/nccl.py)."""
    from vramfit.estimate.framework import scenario_profile

    return context_constant(sc, card).value, nccl_bytes(sc, scenario_profile(sc).nccl_nvls)
