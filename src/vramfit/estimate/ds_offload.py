"""ZeRO-1/2 with the optimizer offloaded: what the GPU still holds for the host's step.

DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py with ``offload_optimizer``: the fp32 partition, its gradient and
the optimizer states live on the host (``self.device = 'cpu'``); the GPU keeps a staging buffer for the reduced
gradients (:func:`offload_grad_staging`) and, at the accumulation boundary, takes each parameter's gradient norm
in float64 as its gradient is copied out (:func:`offload_norm_transient`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import Method, Offload, Parallelism
from vramfit.estimate.deepspeed import zero3_largest

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario


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
